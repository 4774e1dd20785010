// Command billingctl is the billing system's command line for tenants and
// operators; package cli has the commands. `billingctl help` lists
// them.
//
//	go install ./cmd/billingctl   # from the repository's root
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/usagebilling/billing/cmd/billingctl/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	fi, err := os.Stderr.Stat()
	terminal := err == nil && fi.Mode()&os.ModeCharDevice != 0
	code := cli.Main(ctx, os.Args[1:], cli.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Terminal: terminal})
	stop()
	os.Exit(code)
}
