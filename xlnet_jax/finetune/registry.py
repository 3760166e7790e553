"""--task_name -> its Task: the original's names, case-insensitive."""

from xlnet_jax.errors import ConfigError
from xlnet_jax.finetune.squad.task import Squad
from xlnet_jax.finetune.task import Task
from xlnet_jax.finetune.tasks.generic import Classification, Regression
from xlnet_jax.finetune.tasks.glue import GLUE_TASKS
from xlnet_jax.finetune.tasks.race import Race

TASKS: dict[str, type[Task]] = {
    cls.name: cls for cls in (*GLUE_TASKS, Race, Classification, Regression, Squad)
}


def get_task(name: str) -> Task:
    """The task called `name` (case-insensitive), or a ConfigError listing the names."""
    if name.lower() not in TASKS:
        raise ConfigError(f"--task_name {name!r}: unknown; one of {', '.join(TASKS)}")
    return TASKS[name.lower()]()
