module github.com/usagebilling/billing/services/meter

go 1.26.0
