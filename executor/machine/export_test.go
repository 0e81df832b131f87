package machine

// MaxUnlaunched is maxUnlaunched, for tests.
const MaxUnlaunched = maxUnlaunched
