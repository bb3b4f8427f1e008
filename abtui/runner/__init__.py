"""Running an experiment: endpoint checks, load-generator processes, observer protocol."""
