"""Q-Sched experiment: few-step samplers + scheduler-level PTQ on sklearn digits."""
