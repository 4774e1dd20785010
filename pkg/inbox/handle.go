package inbox

import "fmt"

// EventTyped is a payload type that names its event type (every payload of
// package events does).
type EventTyped interface {
	Type() string
}

// Handle adds h to hs under the event type of its payload type T, wrapped by
// On: the key is taken from the type, so a handler cannot be registered under
// another event's name. It panics if hs already has a handler for that event
// type (two handlers for one type is a wiring mistake, found at start).
func Handle[T EventTyped](hs map[string]Handler, h TypedHandler[T]) {
	var zero T
	t := zero.Type()
	if _, dup := hs[t]; dup {
		panic(fmt.Sprintf("inbox: two handlers for %s", t))
	}
	hs[t] = On(h)
}

// HandleBatch is Handle for a set-wise handler, wrapped by OnBatch.
func HandleBatch[T EventTyped](hs map[string]BatchHandler, h TypedBatchHandler[T]) {
	var zero T
	t := zero.Type()
	if _, dup := hs[t]; dup {
		panic(fmt.Sprintf("inbox: two batch handlers for %s", t))
	}
	hs[t] = OnBatch(h)
}
