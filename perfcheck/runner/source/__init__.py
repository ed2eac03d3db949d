"""Where in the tree a finding belongs: frames made repo-relative, the blocks around a line,
where a failed guard's value is made, and which lines of a stack the pull request changed."""
