"""The hook: a migronaut kit over an Airflow ``mongo`` connection."""
