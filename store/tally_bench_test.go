package store

import (
	"context"
	"testing"
)

// qBenchToggle is prepared at Open like the writer's own statements.
var qBenchToggle = wq(`UPDATE ranges SET status = ? WHERE id = 1`)

// BenchmarkTallyTrigger measures what the tallies cost a status change:
// a range's status toggled between planned and leased (as next and
// release do), with the triggers and with them dropped. One op is one
// UPDATE, inside one write of 1000.
//
//	go test -run '^$' -bench BenchmarkTallyTrigger ./store
func BenchmarkTallyTrigger(b *testing.B) {
	for _, c := range []struct {
		name string
		drop bool
	}{{"Tallied", false}, {"Untallied", true}} {
		b.Run(c.name, func(b *testing.B) {
			db := openTest(b, "", Options{Synchronous: "NORMAL"})
			ctx := context.Background()
			if err := db.BulkGroups(ctx, "b.", 10, 100, 10); err != nil {
				b.Fatal(err)
			}
			if c.drop {
				for _, t := range []string{"ranges_tally_update", "groups_tally_update"} {
					if err := db.rawExec(`DROP TRIGGER ` + t); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i += 1000 {
				err := db.Write(ctx, func(tx *Tx) error {
					for j := range min(1000, b.N-i) {
						st := "leased"
						if j%2 == 1 {
							st = "planned"
						}
						if _, err := tx.exec(qBenchToggle, st); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
