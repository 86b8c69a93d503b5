"""Token trees: shape and verify rule, how drafters grow them, the tree loop and its trace."""
