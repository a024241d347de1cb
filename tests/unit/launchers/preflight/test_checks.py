"""dba3c.launchers.preflight.checks: what the environment says about PMI, the MPI library's
name and file, and the disk a run would write to."""

from dba3c.launchers.preflight.checks import disk_free, loaded_mpi_file, mpi_name, pmi_in_use


def test_pmi_is_named_from_the_variables_seen():
    assert pmi_in_use({}) == ("none", ())
    assert pmi_in_use({"PMI_FD": "5", "PMI_RANK": "0", "PMI_SIZE": "3", "HOME": "/"}) == (
        "PMI", ("PMI_FD", "PMI_RANK", "PMI_SIZE"))
    assert pmi_in_use({"SLURM_MPI_TYPE": "pmi2", "PMI_FD": "5"}) == (
        "srun --mpi=pmi2", ("SLURM_MPI_TYPE", "PMI_FD"))
    assert pmi_in_use({"PMIX_RANK": "1", "PMIX_NAMESPACE": "x", "OMPI_COMM_WORLD_RANK": "1"}
                      )[0] == "PMIx"
    assert pmi_in_use({"OMPI_COMM_WORLD_RANK": "1"})[0] == "Open MPI"


def test_mpi_library_names_are_short():
    assert mpi_name("MPICH Version:      5.0.2\nMPICH Release date: x\n") == ("MPICH Version: "
                                                                             "5.0.2")
    assert mpi_name("Open MPI v4.1.6, package: Debian OpenMPI, ident: 4.1.6\n") == ("Open MPI "
                                                                                   "v4.1.6")
    assert mpi_name("") == ""


def test_disk_free_is_measured_at_the_nearest_existing_parent(tmp_path):
    path, free = disk_free(str(tmp_path / "runs" / "not" / "yet"))
    assert path == str(tmp_path) and free > 0


def test_the_loaded_mpi_library_file_is_found_among_the_mapped_files():
    maps = ("7f1 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
            "7f2 r--p 00000000 08:01 2 /opt/ompi/lib/libmpi_cxx.so.40.30.1\n"
            "7f3 r--p 00000000 08:01 3 /venv/lib/libmpi.so.40\n"
            "7f4 r-xp 00000000 08:01 3 /venv/lib/libmpi.so.40\n"
            "7f5 rw-p 00000000 00:00 0 [heap]\n")
    assert loaded_mpi_file(maps) == "/venv/lib/libmpi.so.40"
    cray = "7f1 r-xp 0 08:01 1 /opt/cray/pe/lib64/libmpi_gnu_123.so.12\n"
    assert loaded_mpi_file(cray) == "/opt/cray/pe/lib64/libmpi_gnu_123.so.12"
    assert loaded_mpi_file("7f1 r-xp 0 08:01 1 /usr/lib/libmpifort.so.12\n") == ""
    assert loaded_mpi_file("") == ""
