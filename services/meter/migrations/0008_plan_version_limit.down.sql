DROP INDEX IF EXISTS plan_version_code_effective;
