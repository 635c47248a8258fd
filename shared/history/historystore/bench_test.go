package historystore

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkHistoryFirstPage measures List of the first page (10 entries)
// for a user with 10 entries and a user with 100,000, in one table, and
// prints the two side by side:
//
//	go test -run '^$' -bench BenchmarkHistoryFirstPage -benchtime 200x ./shared/history/historystore/
//
// The 100,000 entries are written with bulkLoad (ApplyBulk through the same
// key functions and cell layout as Apply), not through Apply.
func BenchmarkHistoryFirstPage(b *testing.B) {
	h, reads := newLoggedStore(b)
	newest := base()
	sizes := []int{10, 100_000}
	user := func(n int) string { return fmt.Sprintf("bench-%d", n) }

	start := time.Now()
	for _, n := range sizes {
		bulkLoad(b, h, user(n), distinctWatches(user(n), n, newest))
	}
	fmt.Printf("BenchmarkHistoryFirstPage: loaded %v entries with ApplyBulk in %v\n", sizes, time.Since(start).Round(time.Millisecond))

	nsPerOp := map[int]float64{}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			ctx := context.Background()
			// One read outside the timer: it checks the page and warms
			// the connection.
			p, err := h.List(ctx, user(n), nil, time.Time{}, 10)
			if err != nil {
				b.Fatal(err)
			}
			if len(p.Entries) != 10 || p.Entries[0].VideoID != "v000000" || (p.Next != nil) != (n > 10) {
				b.Fatalf("first page of %d entries: %d entries from %+v, next %+v", n, len(p.Entries), p.Entries[:min(1, len(p.Entries))], p.Next)
			}
			reads.reset()
			for b.Loop() {
				if _, err := h.List(ctx, user(n), nil, time.Time{}, 10); err != nil {
					b.Fatal(err)
				}
			}
			nsPerOp[n] = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			// What each page asked of the server: one bounded read.
			reqs, rows := reads.reset()
			b.ReportMetric(float64(len(reqs))/float64(b.N), "reads/op")
			b.ReportMetric(float64(rows)/float64(b.N), "rows/op")
			if first, ok := nsPerOp[sizes[0]]; ok && n != sizes[0] {
				b.ReportMetric(nsPerOp[n]/first, fmt.Sprintf("x_entries=%d", sizes[0]))
			}
		})
	}
	small, large := nsPerOp[sizes[0]], nsPerOp[sizes[len(sizes)-1]]
	if small > 0 && large > 0 {
		fmt.Printf("BenchmarkHistoryFirstPage: first page of 10: entries=%d %.3f ms/op | entries=%d %.3f ms/op | ratio %.2f\n",
			sizes[0], small/1e6, sizes[len(sizes)-1], large/1e6, large/small)
	}
}
