module github.com/usagebilling/billing/e2e

go 1.26.0
