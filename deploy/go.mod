module github.com/usagebilling/billing/deploy

go 1.26.0
