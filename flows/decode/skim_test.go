package decode

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/naming"
)

// firstPass is what a first pass over msgs gives, with skimming on or off,
// and how many records it skimmed.
type firstPass struct {
	found    []batch.Column
	children map[string]FoundChild
	renamed  [][2]string
	dls      []batch.DeadLetter
	skimmed  int
}

func runFirstPass(t testing.TB, skim bool, msgs ...string) firstPass {
	t.Helper()
	defer func(was bool) { skimming = was }(skimming)
	skimming = skim
	d, err := NewInferring(batch.Schema{}, naming.SnakeCase)
	if err != nil {
		t.Fatal(err)
	}
	d.Govern(Contract{Columns: Evolve, DataType: Evolve})
	var p firstPass
	out := batch.New(batch.Schema{}, 0)
	for i, m := range msgs {
		rec := batch.Record{Topic: "t", Offset: int64(i), Value: []byte(m)}
		if skim && d.skims(rec.Value) {
			p.skimmed++
		}
		p.dls = d.DecodeAll([]batch.Record{rec}, out, p.dls)
	}
	p.found, p.children, p.renamed = d.Found(), d.FoundChildren(), d.Renamed()
	return p
}

// sameFirstPass fails t when skimming changed what the first pass over msgs
// finds, and returns how many records it skimmed.
func sameFirstPass(t testing.TB, msgs ...string) int {
	t.Helper()
	full, skimmed := runFirstPass(t, false, msgs...), runFirstPass(t, true, msgs...)
	n := skimmed.skimmed
	skimmed.skimmed = 0
	if !reflect.DeepEqual(full, skimmed) {
		t.Fatalf("skimming changed the first pass over %q:\nfull    %+v\nskimmed %+v", msgs, full, skimmed)
	}
	return n
}

// TestSkim checks which records after a first one the first pass skims,
// and that skimming them changes nothing it finds: a record it skims is
// one decoding would have left without effect.
func TestSkim(t *testing.T) {
	const order = `{"id": 1, "at": "2026-01-02T03:04:05Z", "note": "a", "n": 1.5, "ok": true, "gone": null, ` +
		`"customer": {"name": "x", "tier": 2}, "lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2, "tags": ["p"]}]}`
	for _, tc := range []struct {
		name string
		msg  string
		skim bool
	}{
		{"same", order, true},
		{"other values", `{"id": 7, "at": "2026-02-03T04:05:06.5+01:00", "note": "b\"c\\", "n": 3, "ok": false, "gone": null, ` +
			`"customer": {"name": "y", "tier": null}, "lines": [{"sku": "c", "qty": 5}]}`, true},
		{"compact", `{"id":1,"at":"2026-01-02T03:04:05Z","note":"a","n":1e3,"ok":true,"gone":null,"customer":{"name":"x","tier":2},"lines":[]}`, true},
		{"whitespace", " {\n\t\"id\" : 1 ,\r\"at\":\"2026-01-02T03:04:05Z\",\"note\":null,\"n\":-0.5,\"ok\":true,\"gone\":null,\"customer\":{ },\"lines\":[ ]} \n", true},
		{"fewer fields", `{"id": 2, "at": null}`, true},
		{"empty", `{}`, true},
		{"new field", `{"id": 2, "new": 1}`, false},
		{"fields moved", `{"at": "2026-01-02T03:04:05Z", "id": 2}`, false},
		{"widens an integer", `{"id": 2.5}`, false},
		{"integer out of range", `{"id": 9223372036854775808}`, false},
		{"not a timestamp", `{"id": 2, "at": "yesterday"}`, false},
		{"escaped timestamp", `{"id": 2, "at": "2026-01-02T03:04:05\u005a"}`, false},
		{"escaped key", `{"i\u0064": 2}`, false},
		{"another type", `{"id": "2"}`, false},
		{"value of a null field", `{"id": 2, "at": null, "note": "a", "n": 1, "ok": true, "gone": 1}`, false},
		{"new nested field", `{"id": 2, "at": null, "note": "a", "n": 1, "ok": true, "gone": null, "customer": {"since": 2020}}`, false},
		{"nested widens", `{"id": 2, "at": null, "note": "a", "n": 1, "ok": true, "gone": null, "customer": {"tier": 2.5}}`, false},
		{"new element field", `{"id": 2, "at": null, "note": "a", "n": 1, "ok": true, "gone": null, "customer": {}, "lines": [{"sku": "a", "price": 1}]}`, false},
		{"element not an object", `{"id": 2, "at": null, "note": "a", "n": 1, "ok": true, "gone": null, "customer": {}, "lines": [1]}`, false},
		{"list now an object", `{"id": 2, "at": null, "note": "a", "n": 1, "ok": true, "gone": null, "customer": {}, "lines": {"sku": "a"}}`, false},
		{"trailing comma", `{"id": 2,}`, false},
		{"unclosed", `{"id": 2`, false},
		{"tail", `{"id": 2} x`, false},
		{"bad literal", `{"id": 2, "at": null, "note": "a", "n": 1, "ok": tru}`, false},
		{"lone minus", `{"id": -}`, false},
		{"nan", `{"id": 2, "at": null, "note": "a", "n": nan}`, false},
		{"number then garbage", `{"id": 2x}`, false},
		{"not an object", `[1]`, false},
		{"tombstone", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if n := sameFirstPass(t, order, tc.msg); (n == 1) != tc.skim {
				t.Fatalf("skimmed %d records after the first, want skimmed %v", n, tc.skim)
			}
		})
	}
}

// TestSkimOrders checks a first pass over many orders with items: every
// one after the first skimmed, the same columns found.
func TestSkimOrders(t *testing.T) {
	msgs := make([]string, 200)
	for i := range msgs {
		msgs[i] = fmt.Sprintf(`{"order_id":%d,"customer":"c-%d","created_at":"2026-01-02T03:04:%02dZ","lines":[{"sku":"s-%d","qty":%d,"price":"%d.5"},{"sku":"t","qty":1,"price":"2"}]}`,
			i, i%7, i%60, i, i%9, i)
	}
	if n := sameFirstPass(t, msgs...); n != len(msgs)-1 {
		t.Fatalf("skimmed %d of %d orders, want all but the first", n, len(msgs))
	}
}

// FuzzSkim checks that skimming never changes what a first pass finds,
// whatever records follow one another.
func FuzzSkim(f *testing.F) {
	for _, seed := range [][2]string{
		{`{"a":1,"b":"x","c":[{"d":1}]}`, `{"a":2,"b":"y","c":[{"d":2},{"d":3}]}`},
		{`{"a":1}`, `{"a":1.5}`},
		{`{"a":"2026-01-02T03:04:05Z"}`, `{"a":"2026-01-02T03:04:05\u005a"}`},
		{`{"a":{"b":{"c":1}}}`, `{"a":{"b":{"c":null}}}`},
		{`{"a":null}`, `{"a":null}`},
		{`{"a":[[1]]}`, `{"a":[[2]]}`},
		{`{"a":1,"a":2}`, `{"a":3,"a":4}`},
		{`{"A b":1}`, `{"A b":1}`},
		{`{"a":1e5}`, `{"a":1-5}`},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, first, next string) {
		sameFirstPass(t, first, next, next, first)
	})
}
