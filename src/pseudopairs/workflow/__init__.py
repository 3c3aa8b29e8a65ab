"""The workflow: what the Snakefile plans with. The config and its layering and checks
(config), the stacks of seeds and the rounds of iterated bootstrapping (stacks, rounds), dry
runs read back (dryrun), the resources of cluster jobs and their calibration (cluster,
calibration) and the software environment (environment). It imports the contracts of the
stages; of the stages only the report (plans, rounds) and the search stage (the run's
configuration) import it."""
