// Package cli is the command line of the billing system for tenants
// and operators (cmd/billingctl, its thin main, builds the billingctl binary): every command is a call
// of the services' HTTP API (pkg/api), with a token it is given or signs
// itself (pkg/auth), its answer printed as a table or as JSON, and an
// application/problem+json answer printed with its status and code. The
// requests it sends are the types generated from the services' OpenAPI
// documents (pkg/api); answers are read generically, as tables of fields.
//
// Exit codes: 0 done; 1 the service refused the request (a problem); 2 bad
// usage (an unknown command or flag, a missing argument, an unreadable
// file); 3 a service could not be reached or answered something other than
// the contract; 4 `usage send` or `events send` finished but some events
// were refused.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"

	"github.com/usagebilling/billing/pkg/auth"
	"github.com/usagebilling/billing/pkg/httpx"
)

// Exit codes of Main.
const (
	ExitOK          = 0
	ExitRefused     = 1
	ExitUsage       = 2
	ExitUnavailable = 3
	ExitSomeRefused = 4
)

// IO is where a command reads input and writes its output and messages.
type IO struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
	// Terminal tells that Err is a terminal: `usage send` draws its progress
	// bar there only then.
	Terminal bool
	// Getenv reads the environment; nil means os.Getenv.
	Getenv func(string) string
}

// command is one leaf of the command tree: "price activate", "recovery".
type command struct {
	name  string // words, space separated
	args  string // positional arguments, for the help
	short string
	// role is the role a self-signed token gets: a tenant role (with the
	// tenant), operator or catalog-admin.
	role string
	// roleFor, when set, picks the role instead, from the parsed flags and
	// the tenant configured ("" for none): `events send -platform` signs
	// platform-ingest, `meter list` viewer with a tenant.
	roleFor func(fs *flag.FlagSet, tenant string) string
	// flags declares the command's own flags on fs; run does the work with
	// the positional arguments left.
	flags func(fs *flag.FlagSet) func(ctx context.Context, c *Client, args []string) error
}

// roleOf is the role cmd signs once its flags are parsed.
func roleOf(cmd *command, fs *flag.FlagSet, tenant string) string {
	if cmd.roleFor != nil {
		return cmd.roleFor(fs, tenant)
	}
	return cmd.role
}

// boolFlag reports whether fs's bool flag name is set.
func boolFlag(fs *flag.FlagSet, name string) bool {
	f := fs.Lookup(name)
	return f != nil && f.Value.String() == "true"
}

// usageError is bad usage: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// SomeRefusedError is what `usage send` and `events send` return when they
// finished and the service refused some events: exit code 4.
// Unwritten are the events of `events send` not written because another
// of their request was refused.
type SomeRefusedError struct{ Refused, Unwritten, Total int }

func (e *SomeRefusedError) Error() string {
	if e.Unwritten > 0 {
		return fmt.Sprintf("%d of %d events refused and %d more not written with them (see the refused events above; fix them and send the file again: what was written replays)",
			e.Refused, e.Total, e.Unwritten)
	}
	return fmt.Sprintf("%d of %d events refused (see the codes above)", e.Refused, e.Total)
}

// Main runs the command line args (without the program name) and returns the
// exit code.
func Main(ctx context.Context, args []string, stdio IO) int {
	if stdio.Getenv == nil {
		stdio.Getenv = os.Getenv
	}
	cfg := configFromEnv(stdio.Getenv)
	root := flag.NewFlagSet("billingctl", flag.ContinueOnError)
	root.SetOutput(stdio.Err)
	cfg.register(root)
	root.Usage = func() { printHelp(stdio.Err, root) }
	if err := root.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	rest := root.Args()
	if len(rest) == 0 || rest[0] == "help" {
		printHelp(stdio.Out, root)
		if len(rest) == 0 {
			return ExitUsage
		}
		return ExitOK
	}
	cmd, n := lookup(rest)
	if cmd == nil {
		fmt.Fprintf(stdio.Err, "billingctl: unknown command %q; billingctl help lists them\n", strings.Join(rest[:min(len(rest), 2)], " "))
		return ExitUsage
	}
	fs := flag.NewFlagSet("billingctl "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(stdio.Err)
	cfg.register(fs)
	run := cmd.flags(fs)
	fs.Usage = func() {
		fmt.Fprintf(stdio.Err, "billingctl %s %s\n  %s\n\nflags (the global ones may also come first):\n", cmd.name, cmd.args, cmd.short)
		fs.PrintDefaults()
	}
	if err := fs.Parse(interleave(fs, rest[n:])); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	c, err := cfg.client(roleOf(cmd, fs, cfg.tenant), stdio)
	if err == nil {
		err = run(ctx, c, fs.Args())
	}
	return report(stdio.Err, cmd.name, err)
}

// interleave moves the flags after positional arguments in front of them,
// so that `invoice show ID -o json` reads as `invoice show -o json ID`
// (package flag stops at the first argument otherwise).
func interleave(fs *flag.FlagSet, args []string) []string {
	var flags, positional []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue // Parse reports it
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	return append(flags, positional...)
}

// report prints err, if any, and returns the exit code it stands for.
func report(w io.Writer, name string, err error) int {
	if err == nil {
		return ExitOK
	}
	var p *httpx.Problem
	var ue usageError
	var some *SomeRefusedError
	var nf notFoundError
	switch {
	case errors.As(err, &p):
		fmt.Fprintf(w, "billingctl %s: refused: %d %s (code %s): %s\n", name, p.Status, http.StatusText(p.Status), p.Code, p.Detail)
		return ExitRefused
	case errors.As(err, &nf):
		fmt.Fprintf(w, "billingctl %s: %v\n", name, err)
		return ExitRefused
	case errors.As(err, &ue):
		fmt.Fprintf(w, "billingctl %s: %s (billingctl %s -h for help)\n", name, ue.msg, name)
		return ExitUsage
	case errors.As(err, &some):
		fmt.Fprintf(w, "billingctl %s: %v\n", name, err)
		return ExitSomeRefused
	default:
		fmt.Fprintf(w, "billingctl %s: %v\n", name, err)
		return ExitUnavailable
	}
}

// IsCommand reports whether args start with a command billingctl has
// ("help" included): the docs' test holds every command they show to it.
func IsCommand(args ...string) bool {
	if len(args) > 0 && args[0] == "help" {
		return true
	}
	c, _ := lookup(args)
	return c != nil
}

// lookup finds the command args start with: two words, else one.
func lookup(args []string) (*command, int) {
	if len(args) == 0 {
		return nil, 0
	}
	if len(args) >= 2 {
		if c, ok := commands[args[0]+" "+args[1]]; ok {
			return c, 2
		}
	}
	if c, ok := commands[args[0]]; ok {
		return c, 1
	}
	return nil, 0
}

var commands = map[string]*command{}

func register(cs ...*command) {
	for _, c := range cs {
		if _, dup := commands[c.name]; dup {
			panic("billingctl: command registered twice: " + c.name)
		}
		commands[c.name] = c
	}
}

func printHelp(w io.Writer, root *flag.FlagSet) {
	fmt.Fprint(w, `billingctl: the billing system's command line, for tenants and operators.

usage: billingctl [global flags] <command> [flags] [arguments]
       billingctl <command> -h     the command's flags

`)
	groups := map[string][]*command{}
	for _, c := range commands {
		g := "tenant"
		switch c.role {
		case roleOperator:
			g = "operator"
		case auth.RoleCatalogAdmin:
			g = "catalog (catalog-admin, no tenant)"
		case "":
			g = "other"
		}
		groups[g] = append(groups[g], c)
	}
	for _, g := range []string{"tenant", "catalog (catalog-admin, no tenant)", "operator", "other"} {
		cs := groups[g]
		sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
		fmt.Fprintf(w, "%s commands:\n", g)
		for _, c := range cs {
			fmt.Fprintf(w, "  %-40s %s\n", strings.TrimSpace(c.name+" "+c.args), c.short)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "global flags (also accepted after the command):\n")
	root.SetOutput(w)
	root.PrintDefaults()
	fmt.Fprint(w, `
exit codes: 0 done, 1 refused by the service (its problem code is printed), 2 bad usage,
3 a service unreachable or off contract, 4 usage send or events send finished with refused events.
`)
}
