module github.com/usagebilling/billing/services/usage

go 1.26.0
