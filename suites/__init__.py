"""Suites (TOML files beside this module) and the harness that runs them: suite parsing,
case expansion, the timer, environment capture, result rows and the runner."""
