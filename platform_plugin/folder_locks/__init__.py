"""No cleanup of a folder while a job, a notebook run or another cleanup works in it: the flocks
both sides take (`protocol`: the lock files, a job's hold; `cleanup`: a real cleanup's set;
`lost`: holds on lock files deleted under their holders)."""
