package metrics

import "github.com/prometheus/client_golang/prometheus"

// Spend bounds (the bound label of orchestrator_launch_bound_reached).
const (
	// BoundMaxMachines: the fleet runs MAX_MACHINES machines.
	BoundMaxMachines = "max_machines"
	// BoundMachineSeconds: the fleet's machines ran
	// MAX_MACHINE_SECONDS_PER_HOUR machine-seconds over the last hour.
	BoundMachineSeconds = "machine_seconds_per_hour"
)

// registerFleet makes and registers the orphan reaper's and the spend
// bounds' metrics.
func (m *Metrics) registerFleet() {
	m.orphansFound = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orchestrator_orphan_machines_found_total",
		Help: "Machines of ours that no live task or pool machine wants, past ORPHAN_GRACE, found by the orphan reaper, by app.",
	}, []string{"app"})
	m.orphansDestroyed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "orchestrator_orphan_machines_destroyed_total",
		Help: "Orphan machines the reaper destroyed, by app.",
	}, []string{"app"})
	m.boundReached = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "orchestrator_launch_bound_reached",
		Help: "1 while a spend bound (max_machines, machine_seconds_per_hour) holds launches back, as this process last read the fleet; 0 otherwise.",
	}, []string{"bound"})
	m.reg.MustRegister(m.orphansFound, m.orphansDestroyed, m.boundReached)
}

// OrphansFound counts n orphan machines of app found.
func (m *Metrics) OrphansFound(app string, n int) {
	if m == nil || n <= 0 {
		return
	}
	m.orphansFound.WithLabelValues(app).Add(float64(n))
}

// OrphanDestroyed counts an orphan machine of app destroyed.
func (m *Metrics) OrphanDestroyed(app string) {
	if m == nil {
		return
	}
	m.orphansDestroyed.WithLabelValues(app).Inc()
}

// BoundReached sets whether bound (BoundMaxMachines, BoundMachineSeconds)
// is reached.
func (m *Metrics) BoundReached(bound string, reached bool) {
	if m == nil {
		return
	}
	v := 0.0
	if reached {
		v = 1
	}
	m.boundReached.WithLabelValues(bound).Set(v)
}
