"""What the dynamic loader reads from an ELF shared library, through pyelftools: SONAME, NEEDED,
RPATH/RUNPATH, the dynamic symbols it defines and the ones it expects from elsewhere (with their GNU symbol
versions). Pure Python, so the checks run on machines without binutils and inside the image alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection, GNUVerSymSection

__all__ = ["ELFError", "ElfInfo", "read_elf"]


@dataclass
class ElfInfo:
    path: Path
    soname: str | None = None
    needed: list[str] = field(default_factory=list)
    rpath: list[str] = field(default_factory=list)
    runpath: list[str] = field(default_factory=list)
    # symbol name -> GNU version it was linked against (None when unversioned)
    undefined: dict[str, str | None] = field(default_factory=dict)
    undefined_weak: set[str] = field(default_factory=set)
    defined: set[str] = field(default_factory=set)
    # NEEDED file -> the version names required from it (GLIBC_2.17, GLIBCXX_3.4.21, libcudart.so.12, ...)
    version_needs: dict[str, set[str]] = field(default_factory=dict)


def _read_dynamic(elf: ELFFile, info: ElfInfo) -> None:
    for section in elf.iter_sections():
        if not isinstance(section, DynamicSection):
            continue
        for tag in section.iter_tags():
            if tag.entry.d_tag == "DT_NEEDED":
                info.needed.append(tag.needed)
            elif tag.entry.d_tag == "DT_SONAME":
                info.soname = tag.soname
            elif tag.entry.d_tag == "DT_RPATH":
                info.rpath = tag.rpath.split(":")
            elif tag.entry.d_tag == "DT_RUNPATH":
                info.runpath = tag.runpath.split(":")


def _read_version_needs(elf: ELFFile, info: ElfInfo) -> None:
    for section in elf.iter_sections():
        if isinstance(section, GNUVerNeedSection):
            for verneed, auxiliaries in section.iter_versions():
                names = info.version_needs.setdefault(verneed.name, set())
                names.update(aux.name for aux in auxiliaries)


def _read_symbols(elf: ELFFile, info: ElfInfo) -> None:
    dynsym = elf.get_section_by_name(".dynsym")
    if dynsym is None:
        return
    versym = next((s for s in elf.iter_sections() if isinstance(s, GNUVerSymSection)), None)
    versions = {}
    for section in elf.iter_sections():
        if isinstance(section, GNUVerNeedSection):
            for _verneed, auxiliaries in section.iter_versions():
                for aux in auxiliaries:
                    versions[aux["vna_other"] & 0x7FFF] = aux.name
    for index, symbol in enumerate(dynsym.iter_symbols()):
        if not symbol.name or symbol["st_info"]["bind"] not in ("STB_GLOBAL", "STB_WEAK"):
            continue
        if symbol["st_shndx"] == "SHN_UNDEF":
            if symbol["st_info"]["bind"] == "STB_WEAK":
                info.undefined_weak.add(symbol.name)
                continue
            version = None
            if versym is not None:
                ndx = versym.get_symbol(index)["ndx"]
                if isinstance(ndx, int):
                    version = versions.get(ndx & 0x7FFF)
            info.undefined[symbol.name] = version
        elif symbol["st_other"]["visibility"] not in ("STV_HIDDEN", "STV_INTERNAL"):
            info.defined.add(symbol.name)


def read_elf(path: Path | str) -> ElfInfo:
    """The dynamic section, version requirements and dynamic symbol table of one shared library."""
    info = ElfInfo(Path(path))
    with open(path, "rb") as handle:
        elf = ELFFile(handle)
        _read_dynamic(elf, info)
        _read_version_needs(elf, info)
        _read_symbols(elf, info)
    return info
