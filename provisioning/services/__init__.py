"""Writes of the provisioning app: jobs, cloud accounts, and the console's record of a space.
Views, tasks, the API and management commands all call these."""
