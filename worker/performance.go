package worker

import "time"

// Performance is the timings block of a success callback (spec 000 §4.4),
// in milliseconds. Download, conversion and upload may overlap (pages are
// uploaded while the next is converted); Total is the wall time of the
// whole task.
type Performance struct {
	TotalMS      int64 `json:"total_time_ms"`
	DownloadMS   int64 `json:"download_time_ms"`
	ConversionMS int64 `json:"conversion_time_ms"`
	UploadMS     int64 `json:"upload_time_ms"`
}

// Timer accumulates a task's timings. It is not safe for concurrent use:
// record durations from one goroutine.
type Timer struct {
	start      time.Time
	Download   time.Duration
	Conversion time.Duration
	Upload     time.Duration
}

// StartTimer starts timing a task.
func StartTimer() *Timer { return &Timer{start: time.Now()} }

// Performance reports the timings so far.
func (t *Timer) Performance() Performance {
	return Performance{
		TotalMS:      time.Since(t.start).Milliseconds(),
		DownloadMS:   t.Download.Milliseconds(),
		ConversionMS: t.Conversion.Milliseconds(),
		UploadMS:     t.Upload.Milliseconds(),
	}
}
