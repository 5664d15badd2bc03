from kvmesh.entry import run

run()
