module github.com/usagebilling/billing/services/query

go 1.26.0
