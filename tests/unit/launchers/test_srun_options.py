"""dba3c.launchers.srun_options: the PMI plugin and the CPUs per task of a job step, from
Slurm's and MPI's own texts (as Slurm 22.05 and the MPI libraries print them)."""

import pytest

from dba3c.errors import UserError
from dba3c.launchers.srun_options import (
    choose_plugin,
    cpus_per_task,
    expand_counts,
    library_first_line,
    mpi_family,
    offered_plugins,
)

SLURM_22_05 = ("MPI plugin types are...\n\tnone\n\tcray_shasta\n\tpmi2\n\tpmix\n"
               "specific pmix plugin versions available: pmix_v4\n")
MPICH_WHEEL = "MPICH Version:      5.0.2\nMPICH Release date: Fri Sep 25 2026\n"
OPEN_MPI = "Open MPI v4.1.6, package: Debian OpenMPI, ident: 4.1.6, repo rev: v4.1.6\n"
CRAY = "MPI VERSION    : CRAY MPICH version 8.1.28.2 (ANL base 3.4a2)\n"
INTEL = "Intel(R) MPI Library 2021.11 for Linux* OS\n"


def test_the_plugins_srun_lists_are_read_with_pmix_versions():
    assert offered_plugins(SLURM_22_05) == ("none", "cray_shasta", "pmi2", "pmix", "pmix_v4")
    assert offered_plugins("srun: MPI types are...\nsrun: none\nsrun: pmi2\n") == ("none",
                                                                                    "pmi2")
    assert offered_plugins("") == ()


@pytest.mark.parametrize(("text", "family"), [(MPICH_WHEEL, "mpich"), (OPEN_MPI, "openmpi"),
                                              (CRAY, "cray-mpich"), (INTEL, "intel"),
                                              ("something else", "unknown")])
def test_the_mpi_library_is_named_from_its_version_text(text, family):
    assert mpi_family(text) == family


@pytest.mark.parametrize(("family", "offered", "plugin"), [
    ("mpich", ("none", "cray_shasta", "pmi2", "pmix", "pmix_v4"), "pmi2"),
    ("mpich", ("none", "pmix_v3"), "pmix_v3"),  # a site MPICH built with PMIx
    ("openmpi", ("none", "cray_shasta", "pmi2", "pmix", "pmix_v4"), "pmix"),
    ("openmpi", ("none", "pmi2", "pmix_v4"), "pmix_v4"),
    ("cray-mpich", ("none", "cray_shasta", "pmi2"), "cray_shasta"),
    ("intel", ("pmix", "pmi2"), "pmi2")])
def test_the_first_plugin_the_library_speaks_and_srun_offers_is_chosen(family, offered,
                                                                        plugin):
    assert choose_plugin(family, "lib", offered, None) == plugin


def test_the_setting_wins_when_srun_offers_it():
    assert choose_plugin("mpich", MPICH_WHEEL, ("pmi2", "pmix"), "pmix") == "pmix"


def test_a_setting_srun_does_not_offer_is_one_line_naming_all():
    with pytest.raises(UserError) as refused:
        choose_plugin("mpich", MPICH_WHEEL, ("none", "pmi2"), "pmix_v5")
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith("DBA3C_SRUN_MPI=pmix_v5 is not a plugin of this srun")
    assert "srun offers none, pmi2" in message and "MPICH Version:      5.0.2" in message


def test_a_library_no_offered_plugin_speaks_is_refused_before_any_rank():
    with pytest.raises(UserError) as refused:
        choose_plugin("openmpi", OPEN_MPI, ("none", "pmi2"), None)
    message = str(refused.value)
    assert message.startswith("no srun PMI plugin fits: openmpi needs pmix")
    assert "srun offers none, pmi2" in message and "Open MPI v4.1.6" in message
    assert "DBA3C_SRUN_MPI" in message


@pytest.mark.parametrize(("text", "counts"), [("12", [12]), ("12(x3)", [12, 12, 12]),
                                              ("12(x2),8", [12, 12, 8]),
                                              ("2,1(x2)", [2, 1, 1])])
def test_slurm_count_lists_are_expanded(text, counts):
    assert expand_counts(text) == counts


@pytest.mark.parametrize(("cpus", "tasks", "per_task"), [
    ("12(x69)", "1(x69)", 12),  # the paper's layout: one rank per node, all its CPUs
    ("8", "6", 1),  # six ranks on one 8-CPU node
    ("2(x2)", "1(x2)", 2),
    ("12,8", "1,2", 4),  # the fewest over the nodes
    ("1", "4", 1)])  # never below one
def test_a_task_gets_its_share_of_its_node(cpus, tasks, per_task):
    assert cpus_per_task(cpus, tasks) == per_task


def test_unreadable_or_mismatched_counts_are_refused():
    with pytest.raises(UserError, match="cannot read the Slurm count list"):
        expand_counts("12(x)")
    with pytest.raises(UserError, match="different node counts"):
        cpus_per_task("12(x2)", "1(x3)")


def test_only_the_first_line_names_the_library():
    # an MPICH built with Intel's compilers says so on its configure line
    assert mpi_family(MPICH_WHEEL + "MPICH configure: CC=icx --with-intel-flags\n") == "mpich"


def test_open_mpis_trailing_nul_is_no_part_of_the_name():
    text = "Open MPI v5.0.11, package: Open MPI Distribution, ident: 5.0.11, Sep 16, 2026\0"
    assert library_first_line(text).endswith("2026") and mpi_family(text) == "openmpi"
