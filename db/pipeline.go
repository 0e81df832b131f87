package db

// TaskCompleteManySQL is TaskCompleteMany's statement, for the callback
// path, which sends it in a pipeline of its own (with the previous group's
// COMMIT and this group's other statements) rather than through Queries;
// TaskCompleteManyArgs gives its arguments in order. Its rows are
// TaskCompleteManyRow's fields, in order.
const TaskCompleteManySQL = taskCompleteMany

// TaskCompleteManyArgs lists arg as TaskCompleteManySQL's parameters.
func TaskCompleteManyArgs(arg TaskCompleteManyParams) []any {
	return []any{arg.IDs, arg.BatchIDs, arg.Statuses, arg.Results, arg.Errors, arg.TokenHashes}
}
