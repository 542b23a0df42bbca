"""
Packaging tests: the Debian package, the PGXN metadata, one version.

Run by pytest (make test, see test/conftest.py): each test_*(ctx) is one
test, run in definition order.

  * the version lives in one place, zklock.control's default_version: the
    Makefile's EXTVERSION, debian/changelog (upstream part), META.json (as
    SemVer: '1.0' is '1.0.0') and the install script's name agree with it;
  * the script layout allows `ALTER EXTENSION zklock UPDATE` later: one
    versioned install script zklock--<version>.sql, installed by DATA, and
    every update script zklock--<from>--<to>.sql installed too;
  * the SQL reference chapter, doc/01-sql-reference.md, has a table row
    for every function of the install script, names every view, and has a
    Settings row for every zklock.* setting the library defines (and none
    other);
  * src/ keeps its layers (doc/08-development.md, "Architecture"), by
    grep: only src/session/ includes a ZooKeeper header, calls zoo_* or
    includes session/session_int.h; each file includes headers of its own
    module, of modules below it and of the top of src/; a *_int.h stays in
    its module; src/recipe/ includes only itself and the C library; the
    Makefile builds every .c file;
  * `dpkg-buildpackage -us -uc -b` builds postgresql-<major>-zklock in a
    temporary copy of the tree (never in the work tree), leaves that copy's
    `git status` clean, and the .deb holds the control file, the script and
    zklock.so where that PostgreSQL looks for them, and depends on
    libzookeeper-mt2 (via shlibs) and postgresql-<major> (only for a major
    installed from Debian's packages);
  * the packaged files work: a backend with Debian's extension_destdir
    pointing at the unpacked .deb runs CREATE EXTENSION zklock, loads the
    packaged zklock.so (checked in /proc/<pid>/maps), takes a lock in the
    test ensemble, and ALTER EXTENSION UPDATE follows an update script.
    (The .deb is not installed for real: the machine's extension files
    belong to `make install` and to whoever else runs tests here.)
"""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

import harness

TIMEOUT = 240                   # seconds per test (the build is ~10-60 s)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The Debian package is built for the major under test (debian/pgversions
# lists 15 to 19; pg_buildext builds those installed from Debian's or
# PGDG's packages).  A major tested from a relocatable kit (test/matrix.sh)
# has no Debian packaging here: the two package tests are skipped then,
# saying so, and run in the matrix's PostgreSQL 15 pass.
PG_MAJOR = str(harness.PG_MAJOR)
DEBIAN_PG = os.path.realpath(harness.PG_CONFIG) == os.path.realpath(
    '/usr/lib/postgresql/%s/bin/pg_config' % PG_MAJOR)
needs_debian_pg = pytest.mark.skipif(
    not DEBIAN_PG, reason='PostgreSQL %s is not installed from a Debian '
    'package here (%s): nothing to build a Debian package against'
    % (PG_MAJOR, harness.PG_CONFIG))
PACKAGE = 'postgresql-%s-zklock' % PG_MAJOR
EXT_DIR = '/usr/share/postgresql/%s/extension' % PG_MAJOR
LIB_DIR = '/usr/lib/postgresql/%s/lib' % PG_MAJOR
BUILD_TIMEOUT = 200

# The package built by test_build_package, reused by the tests after it.
_built = {}


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------

def read(path):
    with open(os.path.join(ROOT, path), encoding='utf-8') as f:
        return f.read()


def control_version():
    m = re.search(r"^default_version\s*=\s*'([^']+)'\s*$",
                  read('zklock.control'), re.M)
    assert m, "zklock.control has no default_version = '...' line"
    return m.group(1)


def semver(version):
    """A PostgreSQL extension version as PGXN's SemVer: '1.0' -> '1.0.0'."""
    m = re.fullmatch(r'(\d+)\.(\d+)(?:\.(\d+))?(-[0-9A-Za-z.-]+)?', version)
    assert m, ('default_version %r cannot be written as SemVer (PGXN '
               'requires it): use MAJOR.MINOR[.PATCH][-PRERELEASE]' % version)
    return '%s.%s.%s%s' % (m.group(1), m.group(2), m.group(3) or '0',
                           m.group(4) or '')


def changelog_version():
    """(full, upstream) version of the newest debian/changelog entry."""
    first = read('debian/changelog').splitlines()[0]
    m = re.match(r'^zklock \(([^)]+)\) ', first)
    assert m, 'debian/changelog does not start with "zklock (<version>)": %r' \
        % first
    full = m.group(1)
    upstream = full.split(':', 1)[-1]            # no epoch
    if '-' in upstream:
        upstream = upstream.rsplit('-', 1)[0]    # no Debian revision
    return full, upstream


def clean_env(**extra):
    """Environment for make/dpkg-buildpackage without the outer make's
    flags."""
    env = dict(os.environ)
    for k in ('MAKEFLAGS', 'MAKELEVEL', 'MFLAGS', 'MAKEOVERRIDES'):
        env.pop(k, None)
    env.update(extra)
    return env


def run(cmd, cwd, timeout, env=None, check=True):
    r = subprocess.run(cmd, cwd=cwd, env=env or clean_env(),
                       stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, errors='replace', timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError('%s failed (status %d) in %s:\n%s' % (
            ' '.join(cmd), r.returncode, cwd,
            '\n'.join((r.stdout + r.stderr).splitlines()[-60:])))
    return r


def make_vars(tmp, *names):
    """Values of Makefile variables, read with an extra makefile that only
    prints them (the Makefile itself is not changed)."""
    extra = os.path.join(tmp, 'print-vars.mk')
    with open(extra, 'w') as f:
        f.write('zklock-print-vars:\n')
        for n in names:
            f.write('\t@echo "%s=$(%s)"\n' % (n, n))
    r = run(['make', '-s', '--no-print-directory', '-f', 'Makefile',
             '-f', extra, 'zklock-print-vars',
             'PG_CONFIG=' + harness.PG_CONFIG], ROOT, 60)
    values = dict(line.split('=', 1) for line in r.stdout.splitlines()
                  if '=' in line)
    return {n: values.get(n, '').split() for n in names}


def copy_tree(dest):
    """Copy the work tree as it is now (tracked and untracked files, not
    ignored ones: no build outputs) to `dest`; returns the file count."""
    r = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others',
                        '--exclude-standard'], cwd=ROOT,
                       capture_output=True, timeout=60)
    assert r.returncode == 0, 'git ls-files failed: %s' % r.stderr.decode()
    count = 0
    for rel in sorted(set(r.stdout.decode().split('\0'))):
        src = os.path.join(ROOT, rel)
        if not rel or not os.path.isfile(src) or os.path.islink(src):
            continue                     # deleted in the work tree
        os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, rel))
        count += 1
    return count


def git(cwd, *args):
    return run(['git', '-c', 'user.name=zklock test',
                '-c', 'user.email=test@zklock.invalid',
                '-c', 'init.defaultBranch=main'] + list(args), cwd, 60)


# ---------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------

def test_versions_agree(ctx):
    """zklock.control's default_version is the one version: the Makefile,
    debian/changelog, META.json and the script name follow it."""
    v = control_version()
    tmp = tempfile.mkdtemp(prefix='zklock-pkgtest-')
    try:
        mv = make_vars(tmp, 'EXTVERSION')
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert mv['EXTVERSION'] == [v], \
        'Makefile EXTVERSION %r != control %r' % (mv['EXTVERSION'], v)

    full, upstream = changelog_version()
    assert upstream == v, ('debian/changelog version %s (upstream part %s) '
                           'does not match zklock.control %s: add a '
                           'changelog entry' % (full, upstream, v))

    meta = json.loads(read('META.json'))
    assert meta.get('meta-spec', {}).get('version') == '1.0.0', \
        'META.json meta-spec must be 1.0.0'
    for key in ('name', 'abstract', 'version', 'maintainer', 'license',
                'provides'):
        assert meta.get(key), 'META.json lacks the mandatory %r' % key
    assert meta['name'] == 'zklock'
    assert meta['version'] == semver(v), \
        'META.json version %s != %s (zklock.control %s as SemVer)' % (
            meta['version'], semver(v), v)
    prov = meta['provides'].get('zklock')
    assert prov, 'META.json provides no "zklock" extension'
    assert prov.get('version') == semver(v), \
        'META.json provides.zklock.version %s != %s' % (prov.get('version'),
                                                        semver(v))
    assert prov.get('file') == 'sql/zklock--%s.sql' % v, \
        'META.json provides.zklock.file %r is not the install script ' \
        'sql/zklock--%s.sql' % (prov.get('file'), v)
    ctx.log('version %s: Makefile, debian/changelog %s, META.json %s'
            % (v, full, meta['version']))


def test_script_layout_allows_updates(ctx):
    """One versioned install script zklock--<version>.sql, installed by the
    Makefile's DATA with every update script zklock--<a>--<b>.sql; the
    control file names no script and no directory of its own."""
    v = control_version()
    control = read('zklock.control')
    for key in ('directory', 'requires'):
        assert not re.search(r'^\s*%s\s*=' % key, control, re.M), \
            'zklock.control sets %s: keep the default layout' % key
    assert re.search(r"^module_pathname\s*=\s*'\$libdir/zklock'", control,
                     re.M), "module_pathname should be '$libdir/zklock'"

    scripts = sorted(os.path.basename(p) for p in
                     glob.glob(os.path.join(ROOT, 'sql', 'zklock--*.sql')))
    assert 'zklock--%s.sql' % v in scripts, \
        'no install script sql/zklock--%s.sql for default_version %s' % (v, v)
    assert not os.path.exists(os.path.join(ROOT, 'sql', 'zklock.sql')), \
        'an unversioned sql/zklock.sql cannot take part in updates'
    updates = [s for s in scripts if s.count('--') == 2]
    installs = [s for s in scripts if s.count('--') == 1]

    tmp = tempfile.mkdtemp(prefix='zklock-pkgtest-')
    try:
        data = make_vars(tmp, 'DATA')['DATA']
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    installed = {os.path.basename(d) for d in data}
    assert 'zklock--%s.sql' % v in installed, \
        'the Makefile DATA (%s) does not install zklock--%s.sql' % (data, v)
    missing = [s for s in updates if s not in installed]
    assert not missing, (
        'update scripts %s are not installed by the Makefile DATA (%s): '
        'use DATA = $(wildcard sql/zklock--*.sql)' % (missing, data))

    # every update script leads, step by step, to default_version
    edges = {}
    for s in updates:
        a, b = s[len('zklock--'):-len('.sql')].split('--')
        edges.setdefault(a, set()).add(b)
    for a in edges:
        seen, todo = set(), [a]
        while todo:
            x = todo.pop()
            if x in seen:
                continue
            seen.add(x)
            todo.extend(edges.get(x, ()))
        assert v in seen, 'no update path from %s to %s' % (a, v)
    ctx.log('install scripts %s, update scripts %s' % (installs,
                                                       updates or 'none yet'))


def test_reference_documents_every_function_and_setting(ctx):
    """The SQL reference chapter (doc/01-sql-reference.md) documents the
    whole SQL surface: every function the install script of
    default_version creates has a row in one of its function tables (the
    name in the row's first cell), every view is named there, and every
    zklock.* setting the library defines (DefineCustom*Variable in src/)
    has a row of its Settings table, which lists no setting the library
    does not define."""
    v = control_version()
    script = read('sql/zklock--%s.sql' % v)
    functions = set(re.findall(
        r'^\s*CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(?:zklock\.)?(\w+)\s*\(',
        script, re.M | re.I))
    views = set(re.findall(
        r'^\s*CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+(?:zklock\.)?(\w+)',
        script, re.M | re.I))
    assert 'zk_lock_exclusive' in functions and 'zk_locks' in views, \
        (functions, views)
    settings = set()
    for path in glob.glob(os.path.join(ROOT, 'src', '**', '*.c'),
                          recursive=True):
        with open(path, encoding='utf-8') as f:
            settings |= set(re.findall(
                r'DefineCustom\w+Variable\(\s*"(zklock\.\w+)"', f.read()))
    assert 'zklock.hosts' in settings, settings

    doc = read(os.path.join('doc', '01-sql-reference.md'))
    first_cells = [row.split('|')[1] for row in re.findall(r'^\|.*\|$', doc,
                                                           re.M)]
    missing = sorted(f for f in functions
                     if not any(re.search(r'`%s\(' % f, c) for c in first_cells))
    assert not missing, ('functions of sql/zklock--%s.sql without a row in '
                         'the tables of doc/01-sql-reference.md: %s'
                         % (v, missing))
    missing = sorted(w for w in views if not re.search(r'\b%s\b' % w, doc))
    assert not missing, 'views not named in doc/01-sql-reference.md: %s' \
        % missing

    start = doc.index('\n## Settings\n')
    end = doc.find('\n## ', start + 1)
    table = doc[start:end if end >= 0 else len(doc)]
    rows = set(re.findall(r'^\| `(zklock\.\w+)` \|', table, re.M))
    assert not sorted(settings - rows), (
        'settings without a row in the Settings table of '
        'doc/01-sql-reference.md: %s' % sorted(settings - rows))
    assert not sorted(rows - settings), (
        'the Settings table lists settings the library does not define: %s'
        % sorted(rows - settings))
    ctx.log('doc/01-sql-reference.md: %d functions, %d views, %d settings'
            % (len(functions), len(views), len(settings)))


# src/'s modules, bottom up (doc/08-development.md, "Architecture"): a
# file includes headers of its own folder and of folders below it, and the
# headers at the top of src/ (the settings, the compatibility header).
LAYERS = ['recipe', 'session', 'deadlock', 'monitor', 'acquire', 'xact',
          'sql']
# C comments, and string and character literals (kept or emptied)
C_TOKEN = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"'
                     r"|'(?:\\.|[^'\\\n])*'", re.S)


def c_sources():
    """{path under src/: its text without comments (strings kept)}"""
    out = {}
    for path in sorted(glob.glob(os.path.join(ROOT, 'src', '**', '*.[ch]'),
                                 recursive=True)):
        with open(path, encoding='utf-8') as f:
            text = f.read()
        out[os.path.relpath(path, os.path.join(ROOT, 'src'))] = C_TOKEN.sub(
            lambda m: m.group(0) if m.group(0)[0] in '"\'' else ' ', text)
    return out


def test_only_the_session_layer_calls_libzookeeper(ctx):
    """SPEC's rule that only the session layer calls libzookeeper, by grep:
    outside src/session/ no file includes a ZooKeeper header, calls a
    zoo_* or zookeeper_* function (comments and strings aside) or includes
    the layer's internal header session/session_int.h.  The check is not
    empty: files of src/session/ do include zookeeper.h and call zoo_a*."""
    includes, calls = {}, {}
    for rel, text in c_sources().items():
        includes[rel] = re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]',
                                   text, re.M)
        code = C_TOKEN.sub('""', text)
        calls[rel] = set(re.findall(r'\b((?:zoo|zookeeper)_\w+)\s*\(',
                                    code))
    inside = lambda rel: rel.startswith('session/')
    zk_headers = lambda incs: [i for i in incs if 'zookeeper' in i]
    wrong = {rel: zk_headers(incs) for rel, incs in includes.items()
             if not inside(rel) and zk_headers(incs)}
    assert not wrong, 'ZooKeeper headers included outside src/session/: %s' \
        % wrong
    wrong = {rel: sorted(c) for rel, c in calls.items()
             if not inside(rel) and c}
    assert not wrong, 'libzookeeper called outside src/session/: %s' % wrong
    wrong = sorted(rel for rel, incs in includes.items()
                   if not inside(rel) and 'session/session_int.h' in incs)
    assert not wrong, 'session/session_int.h included outside ' \
        'src/session/: %s' % wrong
    users = sorted(rel for rel, incs in includes.items()
                   if inside(rel) and 'zookeeper.h' in incs)
    callers = sorted(rel for rel, c in calls.items()
                     if inside(rel) and any(f.startswith('zoo_a') for f in c))
    assert users and callers, (users, callers)
    ctx.log('libzookeeper: included by %s, zoo_a* called from %s (all in '
            'src/session/)' % (', '.join(users), ', '.join(callers)))


def test_modules_include_downward(ctx):
    """src/ is layered as doc/08-development.md draws it: every file lies
    at the top of src/ or in one of the folders of LAYERS; a file includes
    zklock's headers only from its own folder, a folder below it or the
    top of src/; a module's internal header (*_int.h) only from its own
    folder; the pure code (src/recipe/) only its own headers and the C
    library's; and the Makefile builds every .c file."""
    makefile = read('Makefile')
    objs = set(re.findall(r'\bsrc/([\w/]+)\.o\b', makefile))
    for rel, text in c_sources().items():
        folder = os.path.dirname(rel)
        assert folder == '' or folder in LAYERS, \
            'src/%s: in no module of LAYERS' % rel
        if rel.endswith('.c'):
            assert rel[:-2] in objs, 'src/%s: not in the Makefile\'s OBJS' \
                % rel
        for inc in re.findall(r'^\s*#\s*include\s*"([^"]+)"', text, re.M):
            if not os.path.exists(os.path.join(ROOT, 'src', inc)):
                assert folder != 'recipe', \
                    'src/%s: the pure code includes "%s"' % (rel, inc)
                continue
            to = os.path.dirname(inc)
            if folder == 'recipe':
                assert to == 'recipe', \
                    'src/%s: the pure code includes "%s"' % (rel, inc)
            if folder and to:
                assert LAYERS.index(to) <= LAYERS.index(folder), \
                    'src/%s includes "%s", a module above its own' \
                    % (rel, inc)
            if inc.endswith('_int.h'):
                assert to == folder, \
                    'src/%s includes "%s", internal to src/%s/' \
                    % (rel, inc, to)
        if folder == 'recipe':
            assert not re.search(r'^\s*#\s*include\s*<(?!std|string\.h)',
                                 text, re.M), \
                'src/%s: the pure code includes more than the C library' % rel
    ctx.log('src/: %s, each including only its own and lower modules'
            % ' < '.join(LAYERS + ['zklock.c']))


def test_troubleshooting_names_every_sqlstate(ctx):
    """Every SQLSTATE zklock raises (errcode(ERRCODE_...) in src/, mapped
    through PostgreSQL's utils/errcodes.h; warnings, class 01, left out)
    has a row in the Troubleshooting table of doc/04-operations.md."""
    names = set()
    for path in glob.glob(os.path.join(ROOT, 'src', '**', '*.c'),
                          recursive=True):
        with open(path, encoding='utf-8') as f:
            names |= set(re.findall(r'errcode\((ERRCODE_\w+)\)', f.read()))
    assert 'ERRCODE_T_R_SERIALIZATION_FAILURE' in names, names
    header = os.path.join(harness._pg_config('--includedir-server'),
                          'utils', 'errcodes.h')
    with open(header) as f:
        defs = dict((m.group(1), ''.join(m.group(2).split("','")))
                    for m in re.finditer(
                        r"#define (ERRCODE_\w+) MAKE_SQLSTATE\('(.(?:','.){4})'\)",
                        f.read()))
    codes = {}
    for n in names:
        assert n in defs, '%s not in %s' % (n, header)
        if not defs[n].startswith('01'):
            codes[defs[n]] = n
    doc = read(os.path.join('doc', '04-operations.md'))
    rows = re.findall(r'^\| (`[0-9A-Z]{5}`(?:, `[0-9A-Z]{5}`)*) \|', doc, re.M)
    documented = set(re.findall(r'`([0-9A-Z]{5})`', ' '.join(rows)))
    missing = sorted('%s (%s)' % (c, n) for c, n in codes.items()
                     if c not in documented)
    assert not missing, ('SQLSTATEs raised in src/ without a row in the '
                         'Troubleshooting table of doc/04-operations.md: %s'
                         % missing)
    ctx.log('doc/04-operations.md: %d SQLSTATEs raised, all in the table'
            % len(codes))


@needs_debian_pg
def test_build_package(ctx):
    """dpkg-buildpackage -us -uc -b in a temporary copy of the tree: the
    .deb lists control file, script and library; the copy stays clean."""
    v = control_version()
    full, _ = changelog_version()
    tmp = tempfile.mkdtemp(prefix='zklock-pkgtest-')
    try:
        _build(ctx, tmp, v, full)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _built['tmp'] = tmp


def _build(ctx, tmp, v, full):
    src = os.path.join(tmp, 'zklock')
    n = copy_tree(src)
    git(src, 'init', '-q')
    git(src, 'add', '-A')
    git(src, 'commit', '-q', '-m', 'snapshot of the work tree')

    t0 = time.monotonic()
    r = run(['dpkg-buildpackage', '-us', '-uc', '-b'], src, BUILD_TIMEOUT,
            env=clean_env(DEB_BUILD_OPTIONS='nocheck', LC_ALL='C.UTF-8'))
    elapsed = time.monotonic() - t0
    with open(os.path.join(tmp, 'build.log'), 'w') as f:
        f.write(r.stdout + r.stderr)
    # `make test` echoes its recipe, "... bash test/run.sh"
    assert 'test/run.sh' not in r.stdout + r.stderr, \
        'the package build ran the test suite (make test)'

    arch = run(['dpkg-architecture', '-qDEB_HOST_ARCH'], tmp, 30).stdout.strip()
    deb = os.path.join(tmp, '%s_%s_%s.deb' % (PACKAGE, full, arch))
    assert os.path.exists(deb), 'no %s; built: %s' % (
        os.path.basename(deb), sorted(os.listdir(tmp)))

    status = git(src, 'status', '--porcelain', '--ignored=no').stdout
    assert not status.strip(), ('the build left files in the source tree '
                                'that .gitignore does not cover (or changed '
                                'tracked ones):\n%s' % status)

    listing = run(['dpkg-deb', '-c', deb], tmp, 30).stdout
    paths = {line.split()[-1].lstrip('.') for line in listing.splitlines()
             if line.strip()}
    for want in (EXT_DIR + '/zklock.control',
                 EXT_DIR + '/zklock--%s.sql' % v,
                 LIB_DIR + '/zklock.so'):
        assert want in paths, '%s is not in the package:\n%s' % (want,
                                                                   listing)
    for s in glob.glob(os.path.join(ROOT, 'sql', 'zklock--*--*.sql')):
        want = EXT_DIR + '/' + os.path.basename(s)
        assert want in paths, 'update script %s is not in the package' % want

    fields = {}
    for name in ('Package', 'Version', 'Depends'):
        fields[name] = run(['dpkg-deb', '-f', deb, name], tmp,
                           30).stdout.strip()
    assert fields['Package'] == PACKAGE, fields
    assert fields['Version'] == full, fields
    deps = [d.strip().split()[0] for d in fields['Depends'].split(',')]
    for want in ('libzookeeper-mt2', 'postgresql-%s' % PG_MAJOR):
        assert want in deps, 'Depends lacks %s: %s' % (want,
                                                       fields['Depends'])
    _built['deb'] = deb
    if hasattr(ctx, 'figure'):          # newer runners print a FIGURES block
        ctx.figure('dpkg-buildpackage -us -uc -b', elapsed, 's', '%.1f')
    ctx.log('built %s in %.1f s (%d files copied); Depends: %s'
            % (os.path.basename(deb), elapsed, n, fields['Depends']))


@needs_debian_pg
def test_packaged_extension_works(ctx):
    """CREATE EXTENSION from the unpacked .deb (extension_destdir), a lock
    through the packaged zklock.so, ALTER EXTENSION UPDATE to a test
    version through an update script."""
    try:
        if 'deb' not in _built:
            raise AssertionError('test_build_package built no package')
        v = control_version()
        root = os.path.join(_built['tmp'], 'root')
        run(['dpkg-deb', '-x', _built['deb'], root], _built['tmp'], 60)
        os.chmod(_built['tmp'], 0o755)
        # a later version, reached by an update script (not shipped)
        nxt = v + '.999'
        with open(os.path.join(root + EXT_DIR, 'zklock--%s--%s.sql'
                               % (v, nxt)), 'w') as f:
            f.write("COMMENT ON EXTENSION zklock IS 'zklock test update';\n")

        db = 'zklock_pkg'
        ctx.pg.psql('DROP DATABASE IF EXISTS %s' % db)
        ctx.pg.psql('CREATE DATABASE %s' % db)
        conn = ctx.pg.connect(dbname=db, application_name='zkt-package')
        try:
            cur = conn.cursor()
            cur.execute('SET extension_destdir = %s', [root])
            cur.execute("SET zklock.connect_timeout = '%ds'"
                        % ctx.connect_timeout)
            cur.execute("CREATE EXTENSION zklock VERSION '%s'" % v)
            cur.execute("SELECT extversion FROM pg_extension "
                        "WHERE extname = 'zklock'")
            assert cur.fetchall() == [(v,)]

            cur.execute('BEGIN')
            cur.execute("SELECT zk_lock_exclusive('pkg-smoke', '10s')")
            token = cur.fetchone()[0]
            assert token > 0
            assert len(ctx.zi.contenders('pkg-smoke')) == 1
            cur.execute('COMMIT')

            pid = conn.get_backend_pid()
            with open('/proc/%d/maps' % pid) as f:
                maps = {line.split()[-1] for line in f
                        if line.rstrip().endswith('/zklock.so')}
            assert maps == {root + LIB_DIR + '/zklock.so'}, \
                'the backend mapped %s, not the packaged zklock.so' % maps

            cur.execute("SELECT path FROM pg_extension_update_paths('zklock')"
                        " WHERE source = %s AND target = %s", [v, nxt])
            assert cur.fetchall() == [('%s--%s' % (v, nxt),)]
            cur.execute("ALTER EXTENSION zklock UPDATE TO '%s'" % nxt)
            cur.execute("SELECT extversion FROM pg_extension "
                        "WHERE extname = 'zklock'")
            assert cur.fetchall() == [(nxt,)]
        finally:
            conn.close()
        ctx.pg.psql('DROP DATABASE IF EXISTS %s WITH (FORCE)' % db)
        ctx.zi.wait_contenders('pkg-smoke', 0)
        ctx.log('CREATE EXTENSION, a lock (token %d) and ALTER EXTENSION '
                'UPDATE %s -> %s from the packaged files' % (token, v, nxt))
    finally:
        tmp = _built.pop('tmp', None)
        _built.clear()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
