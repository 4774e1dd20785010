module github.com/usagebilling/billing/services/invoice

go 1.26.0
