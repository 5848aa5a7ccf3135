package chsql

import (
	"context"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

func TestValidIdent(t *testing.T) {
	tests := []struct {
		s    string
		want bool
	}{
		{"orders", true}, {"_x1", true}, {"Order_2", true},
		{"", false}, {"1abc", false}, {"a-b", false}, {"a b", false}, {"a`b", false}, {"naïve", false},
		{strings.Repeat("a", MaxIdent), true}, {strings.Repeat("a", MaxIdent+1), false},
	}
	for _, tc := range tests {
		if got := ValidIdent(tc.s); got != tc.want {
			t.Errorf("ValidIdent(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestStatements(t *testing.T) {
	tests := []struct{ got, want string }{
		{Table("db", "t"), "`db`.`t`"},
		{Placeholders(0), ""},
		{Placeholders(3), "?, ?, ?"},
		{Drop("db", "t", DropSuffix("Atomic")), "DROP TABLE IF EXISTS `db`.`t` SYNC"},
		{Drop("db", "t", DropSuffix("Replicated")), "DROP TABLE IF EXISTS `db`.`t` SYNC"},
		{Drop("db", "t", DropSuffix("Ordinary")), "DROP TABLE IF EXISTS `db`.`t`"},
		{Drop("db", "t", DropSuffix("")), "DROP TABLE IF EXISTS `db`.`t`"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// recordConn records the statements it is given and runs none.
type recordConn struct{ execs []string }

func (c *recordConn) Exec(_ context.Context, q string, _ ...any) error {
	c.execs = append(c.execs, q)
	return nil
}

func (c *recordConn) Query(context.Context, string, ...any) (driver.Rows, error) {
	panic("not used")
}

func TestLockStatement(t *testing.T) {
	c := &recordConn{}
	if err := Lock(context.Background(), c, "db", "_sluice_lock_1", Field{"load_id", "a_2d1"}, Field{"owner", ""}); err != nil {
		t.Fatal(err)
	}
	want := "CREATE VIEW `db`.`_sluice_lock_1` AS SELECT 'a_2d1' AS `load_id`, '' AS `owner`"
	if len(c.execs) != 1 || c.execs[0] != want {
		t.Fatalf("Lock ran %q, want %q", c.execs, want)
	}
	if !strings.HasPrefix(want, lockStmt("db", "_sluice_lock_1")) {
		t.Fatalf("WaitQueries would not know the statement %q", want)
	}
}

// TestLockRefusesUnsafeHolders: holders are written into the statement, so
// anything but letters, digits and underscores is refused before it is sent.
func TestLockRefusesUnsafeHolders(t *testing.T) {
	for _, holder := range [][]Field{
		nil,
		{{"holder", "a'b"}},
		{{"holder", "a b"}},
		{{"holder", `a\`}},
		{{"ho lder", "a"}},
		{{"holder", "ok"}, {"", "b"}},
	} {
		c := &recordConn{}
		if err := Lock(context.Background(), c, "db", "l", holder...); err == nil || len(c.execs) != 0 {
			t.Errorf("Lock with holder %q: err %v, ran %q", holder, err, c.execs)
		}
	}
}
