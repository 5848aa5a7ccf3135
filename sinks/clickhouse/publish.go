package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// publish replaces the partitions the load lists (see replace.go) and
// attaches every other partition of the load's staging tables to their
// targets, then drops them and the marker. When recovery has taken the
// publication over (a staging table is gone), the writer finishes it as a
// recovery would (finishTaken).
func (s *Sink) publish(ctx context.Context, l *load) error {
	if s.failPublish.CompareAndSwap(true, false) || (s.parent != nil && s.parent.failPublish.CompareAndSwap(true, false)) {
		return chsql.Transient("clickhouse: publish load %s: failed by a test", l.meta.LoadID)
	}
	tables := sortedKeys(l.stages)
	sinks.PublishOrder(tables)
	for _, table := range tables {
		stage := l.stages[table]
		steps, err := s.publishSteps(ctx, l, table, stage)
		if err != nil {
			return err
		}
		if steps == nil {
			return s.finishTaken(ctx, l, table)
		}
		for _, step := range steps {
			err := step()
			if chsql.Gone(err) {
				// Either recovery renamed the staging table (it publishes
				// the load now), or the target itself is gone.
				taken, aerr := s.takenOver(ctx, stage)
				if aerr != nil {
					return aerr
				}
				if taken {
					return s.finishTaken(ctx, l, table)
				}
			}
			if err != nil {
				return err
			}
		}
		if err := s.exec(ctx, "drop staging table of "+table, s.dropStmt(stage)); err != nil {
			return err
		}
		delete(l.stages, table)
		s.log.Debug("load published", "load", l.meta.LoadID, "table", table, "steps", len(steps))
	}
	if err := s.dropPlists(ctx, l); err != nil {
		return err
	}
	if err := s.dropZKLoad(l.enc); err != nil {
		return err
	}
	return s.exec(ctx, "drop marker", s.dropStmt(markerName(l.enc)))
}

// takeoverWait is how long a writer whose publication recovery took over
// waits for that recovery to finish before it rolls the load forward
// itself: long enough for a recovery's attaches, short enough that a
// recovery that stopped (killed, paused) does not hold Commit up for long.
const takeoverWait = 10 * time.Second

// finishTaken returns once a load whose publication recovery took over at
// table is published, so that a Commit that returned means its rows are
// visible: it waits for the recovery to drop the load's marker, which it
// does last, and once recovery made no progress for takeoverWait rolls the
// load forward itself, fenced by the same renames as two recoveries
// (rollForward).
func (s *Sink) finishTaken(ctx context.Context, l *load, table string) error {
	s.log.Info("publication of load taken over by recovery; waiting for it", "load", l.meta.LoadID, "table", table)
	limit := takeoverWait
	if s.takeoverWait > 0 {
		limit = s.takeoverWait
	} else if s.parent != nil && s.parent.takeoverWait > 0 {
		limit = s.parent.takeoverWait
	}
	var deadline time.Time
	last := ""
	for pause := 20 * time.Millisecond; ; pause = min(2*pause, 500*time.Millisecond) {
		lo, err := s.loadObjectsOf(ctx, l)
		if err != nil {
			return err
		}
		if !lo.marker && len(lo.stages) == 0 && len(lo.plists) == 0 {
			break
		}
		// A recovery that moves on (a table published, a rename) is waited
		// for again, not fenced off.
		if seen := fmt.Sprint(sortedKeys(lo.stages), sortedKeys(lo.plists)); seen != last {
			last, deadline = seen, time.Now().Add(limit)
		}
		if time.Now().After(deadline) {
			s.log.Warn("recovery that took the publication of load over has not finished it; the writer does", "load", l.meta.LoadID, "waited", limit)
			if err := s.finishCommitted(ctx, lo); err != nil {
				return err
			}
			break
		}
		if err := chsql.Sleep(ctx, pause); err != nil {
			return err
		}
	}
	clear(l.stages)
	return nil
}

// loadObjectsOf finds what of load l is in the database: its staging
// tables, partition lists and marker.
func (s *Sink) loadObjectsOf(ctx context.Context, l *load) (*loadObjects, error) {
	ages, err := s.objectAges(ctx)
	if err != nil {
		return nil, err
	}
	loads, _ := groupObjects(ages)
	lo := loads[l.enc]
	if lo == nil {
		lo = &loadObjects{enc: l.enc}
	}
	lo.id = l.meta.LoadID
	return lo, nil
}

// takenOver reports whether a staging table is gone: recovery renamed it
// to publish the load itself.
func (s *Sink) takenOver(ctx context.Context, stage string) (bool, error) {
	ages, err := s.objectAges(ctx, stage)
	if err != nil {
		return false, err
	}
	_, ok := ages[stage]
	return !ok, nil
}

// publishSteps returns the steps publishing a load's staging table of
// table: the replacement of each partition it lists and the attach of
// every other, or on several shards the insert of a CDC target's versions
// through its Distributed table (cdcshards.go). None (nil, no error) when
// recovery renamed the staging table and publishes the load now, when it
// is for it to drop the marker (and the load's node).
func (s *Sink) publishSteps(ctx context.Context, l *load, table, stage string) ([]func() error, error) {
	if dist := s.shardedInsert(table); dist != "" {
		return []func() error{func() error { return s.publishShards(ctx, dist, stage) }}, nil
	}
	pids, err := s.partitions(ctx, stage)
	if err != nil {
		return nil, err
	}
	if len(pids) == 0 {
		// No partition: nothing staged (a replacement with no rows), or
		// recovery took the table over.
		taken, err := s.takenOver(ctx, stage)
		if err != nil {
			return nil, err
		}
		if taken {
			return nil, nil
		}
	}
	listed := l.replace[table]
	steps := make([]func() error, 0, len(listed)+len(pids))
	for _, pid := range listed {
		steps = append(steps, func() error { return s.replace(ctx, table, stage, pid) })
	}
	for _, pid := range pids {
		if !slices.Contains(listed, pid) {
			steps = append(steps, func() error { return s.attach(ctx, table, stage, pid) })
		}
	}
	return steps, nil
}

// attach attaches one partition of a staging table to its target.
func (s *Sink) attach(ctx context.Context, table, stage, pid string) error {
	return s.movePartition(ctx, "ATTACH", table, stage, pid)
}

// movePartition attaches (verb ATTACH) or replaces (REPLACE) one partition
// of a target from a staging table. A staging table created before Ensure
// added nullable columns to the target gets them too, then the statement is
// tried again: again while the target keeps gaining columns meanwhile (a
// table typed by its messages, evolved by other loads), a few times.
func (s *Sink) movePartition(ctx context.Context, verb, table, stage, pid string) error {
	if !validPartitionID(pid) {
		return fmt.Errorf("clickhouse: staging table %s has partition id %q, which sluice cannot name", stage, pid)
	}
	stmt := "ALTER TABLE " + s.table(s.local(table)) + " " + verb + " PARTITION ID '" + pid + "' FROM " + s.table(stage)
	err := s.conn.Exec(ctx, stmt)
	for try := 0; try < maxAlignments && chsql.IsCode(err, chsql.CodeIncompatibleColumns); try++ {
		if aerr := s.alignStage(ctx, table, stage); aerr != nil {
			return aerr
		}
		err = s.conn.Exec(ctx, stmt)
	}
	if err != nil {
		return fmt.Errorf("clickhouse: %s partition %s of %s to %s: %w", strings.ToLower(verb), pid, stage, table, err)
	}
	return nil
}

// maxAlignments bounds how often movePartition aligns a staging table with
// its target before it gives up (the load is then retried).
const maxAlignments = 8

// alignStage adds to a staging table the nullable columns its target gained.
func (s *Sink) alignStage(ctx context.Context, table, stage string) error {
	s.forget(table)
	target, err := s.describe(ctx, table)
	if err != nil {
		return err
	}
	st, err := s.describe(ctx, stage)
	if err != nil {
		return err
	}
	if target == nil || st == nil {
		return fmt.Errorf("clickhouse: align %s with %s: a table is missing", stage, table)
	}
	prev := ""
	for _, c := range target.columns {
		if _, ok := st.column(c.Name); !ok {
			if !c.Nullable {
				return fmt.Errorf("clickhouse: staging table %s lacks column %s of %s, which is not nullable", stage, c.Name, table)
			}
			stmt := "ALTER TABLE " + s.table(stage) + " ADD COLUMN " + chsql.Quote(c.Name) + " " + c.chType
			if prev != "" {
				stmt += " AFTER " + chsql.Quote(prev)
			}
			if err := s.exec(ctx, "align staging table "+stage, stmt); err != nil {
				return err
			}
			if comment := c.comment(); comment != "" {
				if err := s.exec(ctx, "align staging table "+stage, "ALTER TABLE "+s.table(stage)+" COMMENT COLUMN "+
					chsql.Quote(c.Name)+" '"+comment+"'"); err != nil {
					return err
				}
			}
		}
		prev = c.Name
	}
	return nil
}

// partitions lists the ids of a table's partitions that hold rows.
func (s *Sink) partitions(ctx context.Context, table string) ([]string, error) {
	var out []string
	err := retrySystem(ctx, func() error {
		var err error
		out, err = s.readPartitions(ctx, table)
		return err
	})
	return out, err
}

func (s *Sink) readPartitions(ctx context.Context, table string) ([]string, error) {
	rows, err := s.conn.Query(ctx, "SELECT DISTINCT partition_id FROM system.parts WHERE database = ? AND table = ? AND active",
		s.opts.Database, table)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: list partitions of %s: %w", table, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("clickhouse: list partitions of %s: %w", table, err)
		}
		out = append(out, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: list partitions of %s: %w", table, err)
	}
	slices.Sort(out)
	return out, nil
}

// loadPartitions lists the partitions of a target that hold rows of a load:
// those already published. It reads the load id column of the whole table.
// (ClickHouse 18.16 crashes on SELECT DISTINCT _part with a PREWHERE, hence
// GROUP BY and no PREWHERE.)
func (s *Sink) loadPartitions(ctx context.Context, table, loadID string) (map[string]bool, error) {
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"optimize_move_to_prewhere": 0}))
	rows, err := s.conn.Query(ctx, "SELECT _part FROM "+s.table(s.local(table))+" WHERE "+chsql.Quote(batch.LoadIDColumn)+" = ? GROUP BY _part", loadID)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: find published partitions of load %s in %s: %w", loadID, table, err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var part string
		if err := rows.Scan(&part); err != nil {
			return nil, fmt.Errorf("clickhouse: find published partitions of load %s in %s: %w", loadID, table, err)
		}
		out[partitionOfPart(part)] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: find published partitions of load %s in %s: %w", loadID, table, err)
	}
	return out, nil
}

// rollForward publishes a committed load's staging table of one target on
// behalf of whoever staged it. It first renames the staging table (fencing
// the previous publisher: its next ATTACH or REPLACE names a table that is
// gone) and waits for queries still using the old name, then replaces the
// listed partitions (the ids in listed) and attaches the others, except
// those the target holds rows of the load in, then drops it. A replaced
// partition holding rows of the load was replaced already: REPLACE swaps a
// whole partition at once, and nothing else puts the load's rows there.
func (s *Sink) rollForward(ctx context.Context, enc, loadID, table string, listed []string) error {
	var cur, next string
	for attempt := 0; ; attempt++ {
		stages, err := s.stagesOf(ctx, enc, table)
		if err != nil {
			return err
		}
		if len(stages) == 0 {
			return nil // published and dropped by someone else
		}
		if len(stages) > 1 {
			return fmt.Errorf("clickhouse: load %s has %d staging tables for %s: %v; sluice keeps one, check them by hand", loadID, len(stages), table, stages)
		}
		epoch, _, _, _ := parseStage(stages[0])
		cur, next = stages[0], stageName(epoch+1, enc, table)
		err = s.conn.Exec(ctx, "RENAME TABLE "+s.table(cur)+" TO "+s.table(next))
		if err == nil {
			break
		}
		if (chsql.Gone(err) || chsql.IsCode(err, chsql.CodeTableAlreadyExists)) && attempt < 5 {
			continue // another recovery moved it first
		}
		return fmt.Errorf("clickhouse: take over staging table %s: %w", cur, err)
	}
	if err := s.waitQueries(ctx, cur); err != nil {
		return err
	}
	if dist := s.shardedInsert(table); dist != "" {
		// Repeated rows of a version are one row (see cdcshards.go).
		if err := s.publishShards(ctx, dist, next); err != nil {
			return s.fencedStage(ctx, loadID, next, err)
		}
		if err := s.exec(ctx, "drop staging table of "+table, s.dropStmt(next)); err != nil {
			return err
		}
		s.log.Info("committed load published through the shards by recovery", "load", loadID, "table", table)
		return nil
	}
	published, err := s.loadPartitions(ctx, table, loadID)
	if err != nil {
		return err
	}
	pids, err := s.partitions(ctx, next)
	if err != nil {
		return err
	}
	done, replaced := 0, 0
	for _, pid := range listed {
		if published[pid] {
			done++
			continue
		}
		if err := s.replace(ctx, table, next, pid); err != nil {
			return s.fencedStage(ctx, loadID, next, err)
		}
		replaced++
	}
	attached := 0
	for _, pid := range pids {
		if slices.Contains(listed, pid) {
			continue
		}
		if published[pid] {
			done++
			continue
		}
		if err := s.attach(ctx, table, next, pid); err != nil {
			return s.fencedStage(ctx, loadID, next, err)
		}
		attached++
	}
	if err := s.exec(ctx, "drop staging table of "+table, s.dropStmt(next)); err != nil {
		return err
	}
	s.log.Info("committed load published by recovery", "load", loadID, "table", table,
		"attached", attached, "replaced", replaced, "already_published", done)
	return nil
}

// fencedStage turns the failure of a publication step from a staging table
// that another recovery renamed meanwhile (it fenced this one off and
// publishes the load itself) into a retryable error; other failures stay.
func (s *Sink) fencedStage(ctx context.Context, loadID, stage string, err error) error {
	if !chsql.Gone(err) {
		return err
	}
	ages, aerr := s.objectAges(ctx, stage)
	if aerr != nil {
		return err
	}
	if _, ok := ages[stage]; ok {
		return err // the target is what is gone
	}
	return chsql.Transient("clickhouse: publication of load %s was taken over by another recovery, which finishes it: %v", loadID, err)
}

// stagesOf lists the staging tables of a load for one target.
func (s *Sink) stagesOf(ctx context.Context, enc, table string) ([]string, error) {
	ages, err := s.objectAges(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for name := range ages {
		if _, e, t, ok := parseStage(name); ok && e == enc && t == table {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}
