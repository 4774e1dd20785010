module github.com/usagebilling/billing/services/billing

go 1.26.0
