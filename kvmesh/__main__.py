from kvmesh.cli import main

# The same program name (and completion variable, _KVMESH_COMPLETE) as the installed script.
main(prog_name="kvmesh")
