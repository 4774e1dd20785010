package service

import (
	"github.com/usagebilling/billing/pkg/clock"
)

// Clock is where a service reads "now" (package clock, decision 0015): the
// wall clock, or with CLOCK_OFFSET_FILE the wall clock plus the offset in
// that file, which a test moves to drive every service's time at once. The
// test clock is refused unless the configuration accepts the published
// development key (AUTH_DEV_KEY=true on a loopback listener), so a
// production configuration never runs on it. Each service's Build passes it
// to the code that compares with now.
func (d Deps) Clock() (clock.Func, error) {
	return loadClock(NewEnv(), d.Config)
}

func loadClock(e *Env, c Config) (clock.Func, error) {
	path, _ := e.get("CLOCK_OFFSET_FILE")
	if path == "" {
		return clock.Wall, nil
	}
	if !c.DevKey || !loopbackAddr(c.HTTPAddr) {
		e.fail("CLOCK_OFFSET_FILE", "a test clock is accepted only with AUTH_DEV_KEY=true on a loopback listener, never in production")
		return nil, e.Err()
	}
	f, err := clock.NewOffsetFile(path)
	if err != nil {
		e.fail("CLOCK_OFFSET_FILE", "%v", err)
		return nil, e.Err()
	}
	return f.Now, nil
}
