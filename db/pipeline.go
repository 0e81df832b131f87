package db

// The callback path sends its statements in a pipeline of its own (with the
// previous group's COMMIT and this group's other statements) rather than
// through Queries. These are the statements it sends, as sqlc generated
// them; each names its arguments and rows.

// TaskCompleteManySQL is TaskCompleteMany's statement; TaskCompleteManyArgs
// gives its arguments in order. Its rows are TaskCompleteManyRow's fields,
// in order.
const TaskCompleteManySQL = taskCompleteMany

// TaskCompleteManyArgs lists arg as TaskCompleteManySQL's parameters, with
// the events' types (EventTaskCompleted, EventTaskRetrying,
// EventTaskFailed) as the statement records them.
func TaskCompleteManyArgs(arg TaskCompleteManyParams) []any {
	arg = arg.WithEvents()
	return []any{arg.IDs, arg.BatchIDs, arg.Statuses, arg.Results, arg.Errors, arg.TokenHashes, arg.Retryables,
		arg.MaxAttempts, arg.RetireSeconds, arg.TransientSeconds, arg.EventCompleted, arg.EventRetrying, arg.EventFailed}
}

// WithEvents is arg with the types of the events TaskCompleteMany records:
// the constants, so that the SQL writes none of its own.
func (arg TaskCompleteManyParams) WithEvents() TaskCompleteManyParams {
	arg.EventCompleted, arg.EventRetrying, arg.EventFailed = EventTaskCompleted, EventTaskRetrying, EventTaskFailed
	return arg
}

// BatchLockSharedManySQL is BatchLockSharedMany's statement: the shared
// fan-in locks of the batches whose ids are its one parameter (text[]).
const BatchLockSharedManySQL = batchLockSharedMany

// PhaseCheckPendingManySQL is PhaseCheckPendingMany's statement; its
// parameters are the batch ids and phases (text[] each), its rows are
// PhaseCheckPendingManyRow's fields, in order.
const PhaseCheckPendingManySQL = phaseCheckPendingMany
