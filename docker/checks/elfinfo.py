"""Read what the dynamic loader reads from an ELF64 shared library: SONAME, NEEDED, RPATH/RUNPATH, the
dynamic symbols it defines and the ones it expects from elsewhere (with their GNU symbol versions).

Pure standard library, so the checks run on machines without binutils and inside the image alike. Only
little-endian ELF64 (x86-64) is read: that is all the image and its wheels contain.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

SHT_DYNAMIC = 6
SHT_DYNSYM = 11
SHT_GNU_VERDEF = 0x6FFFFFFD
SHT_GNU_VERNEED = 0x6FFFFFFE
SHT_GNU_VERSYM = 0x6FFFFFFF

DT_NULL, DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 14, 15, 29
STB_GLOBAL, STB_WEAK = 1, 2
SHN_UNDEF = 0
STV_HIDDEN, STV_INTERNAL = 2, 1


class ElfError(Exception):
    """The file is not an ELF64 little-endian shared object this reader understands."""


@dataclass
class Section:
    kind: int
    offset: int
    size: int
    link: int
    entsize: int


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


def _read(handle: BinaryIO, offset: int, size: int) -> bytes:
    handle.seek(offset)
    data = handle.read(size)
    if len(data) != size:
        raise ElfError(f"truncated read at {offset} (+{size})")
    return data


def _cstr(table: bytes, offset: int) -> str:
    end = table.index(b"\0", offset)
    return table[offset:end].decode("utf-8", "replace")


def _sections(handle: BinaryIO) -> list[Section]:
    ident = _read(handle, 0, 16)
    if ident[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    if ident[4] != 2 or ident[5] != 1:
        raise ElfError("only little-endian ELF64 is supported")
    header = _read(handle, 16, 48)
    (
        _type,
        _machine,
        _version,
        _entry,
        _phoff,
        shoff,
        _flags,
        _ehsize,
        _phentsize,
        _phnum,
        shentsize,
        shnum,
        _shstrndx,
    ) = struct.unpack("<HHIQQQIHHHHHH", header)
    if shoff == 0 or shnum == 0:
        raise ElfError("no section headers")
    table = _read(handle, shoff, shentsize * shnum)
    sections = []
    for index in range(shnum):
        (_name, kind, _flags, _addr, offset, size, link, _info, _align, entsize) = struct.unpack_from(
            "<IIQQQQIIQQ", table, index * shentsize
        )
        sections.append(Section(kind, offset, size, link, entsize))
    return sections


def _version_names(handle: BinaryIO, sections: list[Section], info: ElfInfo) -> dict[int, str]:
    """Version index -> name, from .gnu.version_r (needed) and .gnu.version_d (defined)."""
    names: dict[int, str] = {}
    for section in sections:
        if section.kind not in (SHT_GNU_VERNEED, SHT_GNU_VERDEF):
            continue
        data = _read(handle, section.offset, section.size)
        strings_section = sections[section.link]
        strings = _read(handle, strings_section.offset, strings_section.size)
        offset = 0
        while True:
            if section.kind == SHT_GNU_VERNEED:
                _ver, count, file_off, aux, next_off = struct.unpack_from("<HHIII", data, offset)
                file_name = _cstr(strings, file_off)
                needs = info.version_needs.setdefault(file_name, set())
                aux_off = offset + aux
                for _ in range(count):
                    _hash, _flags, other, name_off, aux_next = struct.unpack_from("<IHHII", data, aux_off)
                    name = _cstr(strings, name_off)
                    names[other & 0x7FFF] = name
                    needs.add(name)
                    aux_off += aux_next
            else:
                _ver, _flags, index, count, _hash, aux, next_off = struct.unpack_from(
                    "<HHHHIII", data, offset
                )
                if count:
                    (name_off, _aux_next) = struct.unpack_from("<II", data, offset + aux)
                    names[index & 0x7FFF] = _cstr(strings, name_off)
            if not next_off:
                break
            offset += next_off
    return names


def read_elf(path: Path | str) -> ElfInfo:
    """Parse the dynamic section and dynamic symbol table of one shared library."""
    info = ElfInfo(Path(path))
    with open(path, "rb") as handle:
        sections = _sections(handle)
        dynamic = [s for s in sections if s.kind == SHT_DYNAMIC]
        if not dynamic:
            raise ElfError("no dynamic section (static binary?)")
        dyn = dynamic[0]
        dynstr = _read(handle, sections[dyn.link].offset, sections[dyn.link].size)
        data = _read(handle, dyn.offset, dyn.size)
        for offset in range(0, len(data) - 15, 16):
            tag, value = struct.unpack_from("<qQ", data, offset)
            if tag == DT_NULL:
                break
            if tag == DT_NEEDED:
                info.needed.append(_cstr(dynstr, value))
            elif tag == DT_SONAME:
                info.soname = _cstr(dynstr, value)
            elif tag == DT_RPATH:
                info.rpath = _cstr(dynstr, value).split(":")
            elif tag == DT_RUNPATH:
                info.runpath = _cstr(dynstr, value).split(":")

        versions = _version_names(handle, sections, info)
        versym_sections = [s for s in sections if s.kind == SHT_GNU_VERSYM]
        versym = _read(handle, versym_sections[0].offset, versym_sections[0].size) if versym_sections else b""
        for symtab in (s for s in sections if s.kind == SHT_DYNSYM):
            strings = _read(handle, sections[symtab.link].offset, sections[symtab.link].size)
            table = _read(handle, symtab.offset, symtab.size)
            entsize = symtab.entsize or 24
            for index in range(1, len(table) // entsize):
                name_off, st_info, st_other, shndx, _value, _size = struct.unpack_from(
                    "<IBBHQQ", table, index * entsize
                )
                name = _cstr(strings, name_off)
                if not name:
                    continue
                binding = st_info >> 4
                if binding not in (STB_GLOBAL, STB_WEAK):
                    continue
                if shndx == SHN_UNDEF:
                    if binding == STB_WEAK:
                        info.undefined_weak.add(name)
                        continue
                    version = None
                    if versym and 2 * index + 2 <= len(versym):
                        (vidx,) = struct.unpack_from("<H", versym, 2 * index)
                        version = versions.get(vidx & 0x7FFF) if (vidx & 0x7FFF) > 1 else None
                    info.undefined[name] = version
                elif st_other & 3 not in (STV_HIDDEN, STV_INTERNAL):
                    info.defined.add(name)
    return info
