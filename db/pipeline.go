package db

// The callback path sends its statements in a pipeline of its own (with the
// previous group's COMMIT and this group's other statements) rather than
// through Queries. These are the statements it sends, as sqlc generated
// them; each names its arguments and rows.

// TaskCompleteManySQL is TaskCompleteMany's statement; TaskCompleteManyArgs
// gives its arguments in order. Its rows are TaskCompleteManyRow's fields,
// in order.
const TaskCompleteManySQL = taskCompleteMany

// TaskCompleteManyArgs lists arg as TaskCompleteManySQL's parameters.
func TaskCompleteManyArgs(arg TaskCompleteManyParams) []any {
	return []any{arg.IDs, arg.BatchIDs, arg.Statuses, arg.Results, arg.Errors, arg.TokenHashes, arg.Retryables, arg.MaxAttempts, arg.RetireSeconds}
}

// BatchLockSharedManySQL is BatchLockSharedMany's statement: the shared
// fan-in locks of the batches whose ids are its one parameter (text[]).
const BatchLockSharedManySQL = batchLockSharedMany

// PhaseCheckPendingByTasksSQL is PhaseCheckPendingByTasks's statement; its
// one parameter is the task ids (text[]), its rows are
// PhaseCheckPendingByTasksRow's fields, in order.
const PhaseCheckPendingByTasksSQL = phaseCheckPendingByTasks
