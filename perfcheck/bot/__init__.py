"""The GitHub side: events, the plan, /perfcheck commands, the gateway over PyGithub, publishing,
check runs and the App's webhook server. Imports no torch and nothing of perfcheck/runner/."""
