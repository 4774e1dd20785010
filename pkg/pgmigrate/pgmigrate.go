// Package pgmigrate applies embedded golang-migrate migrations to a PostgreSQL
// database. Several migration sets can live in one database (a service's own
// schema beside the outbox and inbox schemas), each tracked in its own table.
package pgmigrate

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers the pgx5:// driver
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

// Set is one set of migrations: the files in Dir of FS, tracked in Table.
type Set struct {
	FS    fs.FS
	Dir   string
	Table string
	// Needs are the sets whose objects this set's migrations use (a
	// function they call): Up applies them first, Down reverts them after,
	// Grant and Check cover them, each once however many sets need it.
	Needs []Set
}

// withNeeds returns sets with every set they need before it, each set once
// (by Table), in the order Up applies them.
func withNeeds(sets []Set) []Set {
	var out []Set
	seen := map[string]bool{}
	var add func(Set)
	add = func(s Set) {
		if seen[s.Table] {
			return
		}
		seen[s.Table] = true
		for _, n := range s.Needs {
			add(n)
		}
		out = append(out, s)
	}
	for _, s := range sets {
		add(s)
	}
	return out
}

// Up applies every pending migration of each set, in order, the sets it
// needs first.
func Up(databaseURL string, sets ...Set) error {
	for _, s := range withNeeds(sets) {
		m, err := open(databaseURL, s)
		if err != nil {
			return err
		}
		err = m.Up()
		serr, derr := m.Close()
		if err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("migrate %s up: %w", s.Table, err)
		}
		if serr != nil || derr != nil {
			return fmt.Errorf("close migration %s: %w", s.Table, errors.Join(serr, derr))
		}
	}
	return nil
}

// Down reverts every migration of each set, last set first, the sets they
// need last.
func Down(databaseURL string, sets ...Set) error {
	sets = withNeeds(sets)
	for i := len(sets) - 1; i >= 0; i-- {
		m, err := open(databaseURL, sets[i])
		if err != nil {
			return err
		}
		err = m.Down()
		_, _ = m.Close()
		if err != nil && !errors.Is(err, migrate.ErrNoChange) {
			return fmt.Errorf("migrate %s down: %w", sets[i].Table, err)
		}
	}
	return nil
}

func open(databaseURL string, s Set) (*migrate.Migrate, error) {
	src, err := iofs.New(s.FS, s.Dir)
	if err != nil {
		return nil, fmt.Errorf("open migrations %s: %w", s.Table, err)
	}
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	u.Scheme = "pgx5"
	q := u.Query()
	q.Set("x-migrations-table", s.Table)
	u.RawQuery = q.Encode()
	m, err := migrate.NewWithSourceInstance("iofs", src, u.String())
	if err != nil {
		return nil, fmt.Errorf("connect for migration %s: %w", s.Table, err)
	}
	return m, nil
}
