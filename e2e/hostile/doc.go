// Package hostile is the hostile-input suite (`make hostile`,
// docs/testing.md): the five services started by the stack launcher, every route
// of their routers (enumerated from the routers themselves) sent generated
// bad input — bad JSON, wrong types, duplicate and case-variant members,
// trailing data, huge numbers, NUL and invalid UTF-8, 1 MB strings,
// oversize bodies and headers, bad tenant ids, periods, cursors and UUIDs,
// wrong methods and content types — and slow clients. It asserts never a
// 5xx, never a hang, every refusal problem+json, and that nothing was
// written (lists and counts read back through the APIs). The test is behind
// the build tag hostile.
package hostile
