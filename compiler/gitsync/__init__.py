"""Git sync: Git-defined pipelines follow their branch (a leader-elected poller, the sync
route), through the one save path."""
