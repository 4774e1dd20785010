// Command token prints a bearer token for the services' APIs:
//
//	go run ./pkg/cmd/token -role operator -sub alice
//	go run ./pkg/cmd/token -role tenant -tenant acme
//
// It signs with the first key of AUTH_JWT_KEYS when that is set, else with
// the published development key (auth.DevKey), which services accept only
// with AUTH_DEV_KEY=true.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/usagebilling/billing/pkg/auth"
)

func main() {
	role := flag.String("role", auth.RoleOperator, "operator, tenant or service")
	tenant := flag.String("tenant", "", "the tenant of a tenant token")
	sub := flag.String("sub", "", "the subject (actor); default dev-<role>")
	ttl := flag.Duration("ttl", time.Hour, "how long the token is valid")
	flag.Parse()
	if *sub == "" {
		*sub = "dev-" + *role
	}
	key := auth.DevKey
	if v := os.Getenv("AUTH_JWT_KEYS"); v != "" {
		keys, err := auth.ParseKeys(v)
		if err != nil {
			fmt.Fprintln(os.Stderr, "token: AUTH_JWT_KEYS:", err)
			os.Exit(2)
		}
		key = keys[0]
	}
	t, err := auth.Token(key, auth.NewClaims(*sub, *role, *tenant, *ttl))
	if err != nil {
		fmt.Fprintln(os.Stderr, "token:", err)
		os.Exit(2)
	}
	fmt.Println(t)
}
