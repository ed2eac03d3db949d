"""Probe processes: started fresh or forked from a side's fork server, behind that side's walls
(the sandbox), timed out, reaped, and their results handed back through an inherited descriptor."""
