package soak

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/usagebilling/billing/e2e/chaos"
	"github.com/usagebilling/billing/e2e/load"
)

// Assigned is the series that is 1 at a reading when every consumer group
// of every service was stable and held every partition of its topics, 0
// when not (or when the broker could not tell).
const Assigned = "assigned"

// Point is one reading of a series, T seconds after the load began.
type Point struct{ T, V float64 }

// Watch samples the running system every Interval: each service's resident
// memory, goroutines and open files (its /metrics), the connections to each
// database (pg_stat_activity, the services' roles only), every table's size
// with its indexes and its dead tuples (pg_stat_user_tables), the outbox
// and inbox backlogs and the consumer lag (the chaos harness's Backlogs),
// and the facts accepted and charged so far.
type Watch struct {
	H        *chaos.Harness
	Ledger   *chaos.Ledger
	Interval time.Duration
	Origin   time.Time

	mu     sync.Mutex
	series map[string][]Point
	errs   int
}

// NewWatch returns a watch of h whose times count from origin.
func NewWatch(h *chaos.Harness, ledger *chaos.Ledger, interval time.Duration, origin time.Time) *Watch {
	return &Watch{H: h, Ledger: ledger, Interval: interval, Origin: origin, series: map[string][]Point{}}
}

// Run samples until ctx ends.
func (w *Watch) Run(ctx context.Context) {
	t := time.NewTicker(w.Interval)
	defer t.Stop()
	for {
		w.sample(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Series returns a copy of every series.
func (w *Watch) Series() map[string][]Point {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string][]Point, len(w.series))
	for k, v := range w.series {
		out[k] = append([]Point(nil), v...)
	}
	return out
}

// Errors returns how many readings failed (a service or the broker down).
func (w *Watch) Errors() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errs
}

func (w *Watch) add(t float64, name string, v float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.series[name] = append(w.series[name], Point{t, v})
}

func (w *Watch) failed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs++
}

// purged are the tables the retention purges delete from; their rows
// deleted (pg_stat_user_tables.n_tup_del) are the purges' progress.
var purged = map[string]bool{"outbox_event": true, "inbox_event": true, "idempotency_key": true, "inbox_quarantine": true}

var processMetrics = map[string]string{
	"process_resident_memory_bytes": "rss",
	"go_goroutines":                 "goroutines",
	"process_open_fds":              "fds",
	"go_memstats_heap_inuse_bytes":  "heap",
	// The relay's events acknowledged by the broker: a service's level is
	// read once it has published (Settled).
	"outbox_published_total": "published",
}

func (w *Watch) sample(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, w.Interval)
	defer cancel()
	t := time.Since(w.Origin).Seconds()
	w.add(t, "accepted", float64(w.Ledger.Accepted()))
	// Read first, so a service's readings below count as settled only when
	// its consumers already held their partitions.
	if ok, _, err := w.H.Kafka.Assigned(ctx); err == nil && ok {
		w.add(t, Assigned, 1)
	} else {
		w.add(t, Assigned, 0)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	w.add(t, "harness/heap in use", float64(ms.HeapInuse))
	if rss, ok := selfRSS(); ok {
		w.add(t, "harness/resident", rss)
	}
	for _, name := range w.H.Stack.Services() {
		if w.H.Stack.PID(name, 0) == 0 {
			continue
		}
		if err := w.metrics(ctx, t, name); err != nil {
			w.failed()
		}
	}
	if err := w.database(ctx, t); err != nil {
		w.failed()
	}
	b, err := w.H.Backlogs(ctx)
	if err != nil {
		w.failed()
		return
	}
	for name, bl := range b {
		w.add(t, "outbox/"+name, float64(bl.OutboxPending+bl.DeadLetters))
		w.add(t, "inbox/"+name, float64(bl.Deferred+bl.Quarantined))
		w.add(t, "lag/"+name, float64(bl.Lag))
	}
}

func (w *Watch) metrics(ctx context.Context, t float64, service string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.H.Stack.URL(service, 0)+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s /metrics: %s", service, resp.Status)
	}
	series, err := load.ParseText(resp.Body)
	if err != nil {
		return err
	}
	for _, s := range series {
		if short, ok := processMetrics[s.Name]; ok {
			w.add(t, short+"/"+service, s.Value)
		}
	}
	return nil
}

// database reads the connections per database, and each database's tables:
// size with indexes, dead tuples, and billing's charges inserted so far.
func (w *Watch) database(ctx context.Context, t float64) error {
	rows, err := w.H.DB["billing"].Query(ctx, `
		SELECT datname, count(*) FROM pg_stat_activity
		WHERE datname IS NOT NULL AND usename <> current_user GROUP BY datname`)
	if err != nil {
		return err
	}
	conns := map[string]float64{}
	for rows.Next() {
		var db string
		var n int64
		if err := rows.Scan(&db, &n); err != nil {
			rows.Close()
			return err
		}
		conns[db] = float64(n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, name := range w.H.Stack.Services() {
		w.add(t, "conns/"+name, conns[name]) // the throwaway cluster names each database after its service
	}
	for name, pool := range w.H.DB {
		rows, err := pool.Query(ctx, `
			SELECT relname, pg_total_relation_size(relid), n_dead_tup, n_tup_ins, n_tup_del FROM pg_stat_user_tables`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var table string
			var size, dead, ins, del int64
			if err := rows.Scan(&table, &size, &dead, &ins, &del); err != nil {
				rows.Close()
				return err
			}
			w.add(t, "size/"+name+"."+table, float64(size))
			w.add(t, "dead/"+name+"."+table, float64(dead))
			if purged[table] {
				w.add(t, "purged/"+name+"."+table, float64(del))
			}
			if name == "billing" && table == "charge" {
				w.add(t, "charged", float64(ins))
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	return nil
}

// selfRSS is the test process's resident memory (VmRSS), in bytes.
func selfRSS() (float64, bool) { return status("VmRSS:") }

// peakRSS is the test process's peak resident memory (VmHWM), in bytes.
func peakRSS() float64 {
	v, _ := status("VmHWM:")
	return v
}

func status(field string) (float64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}
