package app_test

import (
	"os"
	"testing"

	"github.com/usagebilling/billing/testkit/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
