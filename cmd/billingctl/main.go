// Command billingctl is the billing system's command line for tenants and
// operators; package billingctl has the commands. `billingctl help` lists
// them.
//
//	go install ./e2e/cmd/billingctl   # from the repository's root
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/usagebilling/billing/e2e/billingctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	fi, err := os.Stderr.Stat()
	terminal := err == nil && fi.Mode()&os.ModeCharDevice != 0
	code := billingctl.Main(ctx, os.Args[1:], billingctl.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Terminal: terminal})
	stop()
	os.Exit(code)
}
