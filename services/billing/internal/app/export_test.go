package app

// SetAfterChunk runs f at the end of each chunk's transaction of a close's
// tally (an error rolls that chunk back and fails the close).
func (a *App) SetAfterChunk(f func(chunk int64) error) { a.afterChunk = f }
