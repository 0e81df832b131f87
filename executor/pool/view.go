package pool

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/arke-institute/orchestrator/db"
	"github.com/arke-institute/orchestrator/executor/machine"
	"github.com/arke-institute/orchestrator/jobs"
)

// Progress counts the batches' tasks of the pool phases (tasks.Table),
// with each phase's pool in Detail: its machines by state (starting:
// launched, not yet heard from; busy: holding a lease; idle), machines
// launched, tasks leased, and busy and live machine-seconds (their ratio
// is the pool's efficiency). A batch in a shared pool's phase shows the
// shared pool. The spend bound the phase's launches wait for, if any, is
// in Detail too (machine.BoundsInto).
func (e *Executor) Progress(ctx context.Context, q *db.Queries, batchIDs []string) (map[string][]jobs.PhaseProgress, error) {
	out, err := e.Table.Progress(ctx, q, batchIDs)
	if err != nil || len(out) == 0 {
		return out, err
	}
	pools, err := q.PoolSummary(ctx, batchIDs)
	if err != nil {
		return nil, fmt.Errorf("reading the pools of batches: %w", err)
	}
	type key struct{ batch, phase string }
	byBatch, shared := map[key]db.PoolSummaryRow{}, map[string]db.PoolSummaryRow{}
	for _, p := range pools {
		if p.BatchID == nil {
			shared[p.Phase] = p
		} else {
			byBatch[key{*p.BatchID, p.Phase}] = p // the latest of a phase, in id order
		}
	}
	for batch, ps := range out {
		for i := range ps {
			p, ok := byBatch[key{batch, ps[i].Phase}]
			if !ok && ps[i].Open() > 0 {
				p, ok = shared[ps[i].Phase]
			}
			if ok {
				ps[i].Detail = detail(p)
			}
		}
	}
	return out, machine.BoundsInto(ctx, q, out)
}

// detail is a pool's counts, as PhaseProgress.Detail names them.
func detail(p db.PoolSummaryRow) map[string]int64 {
	return map[string]int64{
		"pool_id": p.ID, "machines_starting": p.Starting, "machines_busy": p.Busy, "machines_idle": p.Idle,
		"machines": p.Machines, "leases": p.Tasks, "busy_seconds": p.BusyMs / 1000, "machine_seconds": p.LiveMs / 1000,
	}
}

// poolView is a pool on the batch page.
type poolView struct {
	ID                       int64
	Phase                    string
	Shared                   bool
	Starting, Busy, Idle     int64
	Machines, Leases         int64
	LeasesPerSecond          float64
	TasksPerMachine          float64
	Created                  time.Time
	Closed                   *time.Time
	BusySeconds, LiveSeconds int64
}

// poolTemplate renders the pools' section.
const poolTemplate = `{{if .}}<table class="pools"><thead><tr><th>pool</th><th>phase</th><th>starting</th><th>busy</th><th>idle</th><th>machines</th><th>leases</th><th>leases/s</th><th>tasks/machine</th><th>busy share</th></tr></thead><tbody>
{{range .}}<tr><td>{{.ID}}{{if .Shared}} (shared){{end}}{{if .Closed}} (closed){{end}}</td><td class="phase-name">{{.Phase}}</td><td>{{.Starting}}</td><td>{{.Busy}}</td><td>{{.Idle}}</td><td>{{.Machines}}</td><td>{{.Leases}}</td><td>{{decimal .LeasesPerSecond}}</td><td>{{decimal .TasksPerMachine}}</td><td>{{pct .BusySeconds .LiveSeconds}}%</td></tr>
{{end}}</tbody></table>{{else}}<p class="empty">No pool.</p>{{end}}`

// Views are the batch's pools (its own, and the shared pools of its
// phase) and its failed tasks of the pool phases; none when no phase runs
// on pools.
func (e *Executor) Views(ctx context.Context, batchID string) ([]jobs.View, error) {
	failed, err := e.FailedView(ctx, batchID)
	if err != nil || len(failed) == 0 {
		return failed, err
	}
	rows, err := db.New(e.deps.Pool).PoolSummary(ctx, []string{batchID})
	if err != nil {
		return nil, fmt.Errorf("reading the pools of batch %s: %w", batchID, err)
	}
	batch, err := e.deps.JobBatch(ctx, batchID)
	if err != nil {
		return nil, err
	}
	var pools []poolView
	for _, p := range rows {
		if p.BatchID == nil && p.Phase != batch.Status {
			continue // a shared pool of a phase the batch is not in
		}
		v := poolView{ID: p.ID, Phase: p.Phase, Shared: p.BatchID == nil, Starting: p.Starting, Busy: p.Busy, Idle: p.Idle,
			Machines: p.Machines, Leases: p.Tasks, Created: p.CreatedAt, Closed: p.ClosedAt, BusySeconds: p.BusyMs / 1000, LiveSeconds: p.LiveMs / 1000}
		end := time.Now()
		if p.ClosedAt != nil {
			end = *p.ClosedAt
		}
		if s := end.Sub(p.CreatedAt).Seconds(); s > 0 {
			v.LeasesPerSecond = round2(float64(p.Tasks) / s)
		}
		if p.Machines > 0 {
			v.TasksPerMachine = round2(float64(p.Tasks) / float64(p.Machines))
		}
		pools = append(pools, v)
	}
	return append([]jobs.View{{ID: "pools", Title: "Pools", Template: poolTemplate, Data: pools}}, failed...), nil
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }
