DROP TABLE period_grace;
