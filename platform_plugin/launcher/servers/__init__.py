"""One job on several servers: the job link between the launchers and the job's one id."""
