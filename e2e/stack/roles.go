package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Each service's database has two roles, as in production (see
// pkg/pgmigrate/roles.go): the owner, which owns the database and runs
// `<service> migrate`, and the runtime role the service runs as, DML only. The
// launcher creates both, with a password made for the run, and runs
// `migrate` before starting a service. DatabaseURL stays the superuser's,
// for tests that look inside.

// roleURLs are a service's database URLs as its owner and its runtime role.
type roleURLs struct{ owner, runtime string }

// createRoles creates the owner and runtime roles of every service's
// database and hands the database to the owner.
func (s *Stack) createRoles(ctx context.Context) error {
	s.roles = map[string]roleURLs{}
	for _, name := range s.opts.Services {
		prefix := name
		if s.opts.PostgresURL != "" { // a shared server: the run's prefix, as its databases have
			prefix = s.opts.DatabasePrefix + "_" + name
		}
		owner, runtime := prefix+"_owner", prefix+"_app"
		conn, err := pgx.Connect(ctx, s.direct[name])
		if err != nil {
			return fmt.Errorf("create roles of %s: %w", name, err)
		}
		urls := roleURLs{}
		for _, r := range []struct {
			role string
			url  *string
		}{{owner, &urls.owner}, {runtime, &urls.runtime}} {
			password := make([]byte, 12)
			_, _ = rand.Read(password)
			pw := hex.EncodeToString(password)
			ident := pgx.Identifier{r.role}.Sanitize()
			for _, q := range []string{
				fmt.Sprintf("DO $$ BEGIN CREATE ROLE %s; EXCEPTION WHEN duplicate_object THEN NULL; END $$", ident),
				fmt.Sprintf("ALTER ROLE %s LOGIN PASSWORD '%s'", ident, pw),
			} {
				if _, err := conn.Exec(ctx, q); err != nil {
					conn.Close(context.WithoutCancel(ctx))
					return fmt.Errorf("create role %s: %w", r.role, err)
				}
			}
			*r.url = withUser(s.direct[name], r.role, pw)
		}
		_, err = conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{s.dbNames[name]}.Sanitize()+" OWNER TO "+pgx.Identifier{owner}.Sanitize())
		conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("give database %s to %s: %w", s.dbNames[name], owner, err)
		}
		s.roles[name] = urls
	}
	return nil
}

// runtimeURL is the URL the service runs with: its runtime role, through
// the database's proxy when there is one.
func (s *Stack) runtimeURL(name string) string {
	u, _ := url.Parse(s.roles[name].runtime)
	return withUser(s.proxied[name], u.User.Username(), password(u))
}

func password(u *url.URL) string {
	pw, _ := u.User.Password()
	return pw
}

// migrateAll runs `<service> migrate` of every service, at once.
func (s *Stack) migrateAll(ctx context.Context, binDir string) error {
	t := time.Now()
	errs := make([]error, len(s.opts.Services))
	var wg sync.WaitGroup
	for i, name := range s.opts.Services {
		wg.Go(func() { errs[i] = s.migrate(ctx, name, filepath.Join(binDir, name)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.log.Info("migrations applied", "services", len(s.opts.Services), "took", since(t))
	return nil
}

// migrate runs `bin migrate` for service name: the owner migrates and
// grants the runtime role its rights.
func (s *Stack) migrate(ctx context.Context, name, bin string) error {
	env := maps.Clone(s.instances[name][0].env)
	env["DATABASE_MIGRATE_URL"] = s.roles[name].owner
	cmd := exec.CommandContext(ctx, bin, "migrate")
	cmd.Env = childEnv(env, "127.0.0.1:0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s migrate: %w\n%s", name, err, lastLines(string(out), 15))
	}
	return nil
}

func withUser(rawURL, user, password string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	u.User = url.UserPassword(user, password)
	return u.String()
}
