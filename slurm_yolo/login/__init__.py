"""Login nodes: yolo-sbatch's plan, its job script, the advisory budget check and the submission."""
