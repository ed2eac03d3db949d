"""perfcheck.yml: the project's settings, read once at the edge into one typed object.

Torch-free. A config error names the file, the key and what was expected (the CLI exits 2).
"""

from __future__ import annotations

import difflib
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    ValidationError,
    field_validator,
)

from perfcheck.settings import (
    PROBE_NAMES,
    AckEntry,
    BisectConfig,
    BudgetsConfig,
    CompileConfig,
    GitHubConfig,
    HistoryConfig,
    MatrixEntry,
    ReviewConfig,
    Section,
    SweepConfig,
    TimingConfig,
    WorkloadConfig,
    gitignore_pattern,
)

CONFIG_NAMES = ("perfcheck.yml", ".github/perfcheck.yml")

S = TypeVar("S", bound=BaseModel)


def probe_names() -> tuple[str, ...]:
    """Every probe the review knows (the registry in perfcheck/core/probes), built-in or a plugin's."""
    from perfcheck.core import probes

    return probes.names()


def finding_categories() -> tuple[str, ...]:
    """Every finding category known now (perfcheck/vocabulary.py), the built-in probes' included:
    the registry registers theirs as it loads."""
    from perfcheck.core import probes  # noqa: F401 (the built-in probes register theirs as it loads)
    from perfcheck.vocabulary import categories

    return categories()


def default_probes() -> tuple[str, ...]:
    """What runs when neither --probes nor a workload's `probes` says: the single-process checks.
    The others cost more (several processes, a profile pass) and are asked for by name."""
    from perfcheck.core import probes

    return probes.defaults()


DEFAULT_WORKLOAD = "mlp-tiny"


class ConfigError(ValueError):
    """A config that cannot be used; the message is meant for the user as it stands."""


def _category_beside(ack: AckEntry) -> AckEntry:
    """An ack whose `category` may stand beside its `break:` (the compile probe's, which matches
    breaks: perfcheck/core/probes/compile_accepted.py)."""
    from perfcheck.core.probes.compile_accepted import category_beside

    return category_beside(ack)


class Config(Section):
    workloads: list[WorkloadConfig] = Field(
        default_factory=lambda: [WorkloadConfig(name=DEFAULT_WORKLOAD, entry=DEFAULT_WORKLOAD)]
    )
    budgets: BudgetsConfig = BudgetsConfig()
    compile: CompileConfig = CompileConfig()
    timing: TimingConfig = TimingConfig()
    github: GitHubConfig = GitHubConfig()
    review: ReviewConfig = ReviewConfig()
    history: HistoryConfig = HistoryConfig()
    bisect: BisectConfig = BisectConfig()
    sweep: SweepConfig = SweepConfig()
    matrix: dict[str, MatrixEntry] = Field(
        default_factory=dict,
        description="category -> entry: the project's additions to the root-cause matrix",
    )
    acks: list[Annotated[AckEntry, AfterValidator(_category_beside)]] = Field(
        default_factory=list, description="known changes, accepted with a reason"
    )
    paths: list[Annotated[str, AfterValidator(gitignore_pattern)]] = Field(
        default_factory=lambda: ["**/*.py"],
        description="gitignore (gitwildmatch) patterns of the files whose change triggers a review; "
        "the last pattern that matches a file decides, so `!pattern` leaves out what an earlier one named",
    )
    plugins: list[str] = Field(
        default_factory=list,
        description="modules of plugin probes (installed packages); each section under a plugin "
        "probe's name holds its settings",
    )
    # Filled by parse_config from the sections under probes' names (perfcheck's own and the
    # plugins'), each validated by its probe's settings model (its descriptor's ``settings``);
    # not a key of the file. Read with ``section``.
    probe_settings: dict[str, BaseModel] = Field(default_factory=dict, exclude=True)
    source: str = Field(default="(defaults)", exclude=True, description="where this config came from")

    @field_validator("matrix")
    @classmethod
    def _categories(cls, v: dict[str, MatrixEntry]) -> dict[str, MatrixEntry]:
        for category in v:
            if category not in finding_categories():
                raise ValueError(f"finding categories as keys; {category!r} is not one{_closest(category)}")
        return v

    @field_validator("acks")
    @classmethod
    def _ack_categories(cls, v: list[AckEntry]) -> list[AckEntry]:
        for ack in v:
            if ack.category is not None and ack.category not in finding_categories():
                raise ValueError(f"finding categories; {ack.category!r} is not one{_closest(ack.category)}")
        return v

    @field_validator("workloads")
    @classmethod
    def _unique(cls, v: list[WorkloadConfig]) -> list[WorkloadConfig]:
        if not v:
            raise ValueError("at least one workload")
        seen: set[str] = set()
        for w in v:
            if w.name in seen:
                raise ValueError(f"unique workload names; {w.name!r} appears twice")
            seen.add(w.name)
        return v

    def workload(self, name: str) -> WorkloadConfig:
        for w in self.workloads:
            if w.name == name:
                return w
        raise KeyError(name)

    def section(self, model: type[S]) -> S:
        """A probe's config section, as its settings model (``model``): the file's, else the
        model's defaults."""
        found = next((s for s in self.probe_settings.values() if type(s) is model), None)
        return found if found is not None else model()


def planned_probes(
    workloads: list[WorkloadConfig], probes: tuple[str, ...] = ()
) -> list[tuple[WorkloadConfig, str]]:
    """(workload, probe) for every probe a run of these workloads makes: ``probes`` where given
    (within a workload's own ``probes`` list, if it has one), else the workload's, else the defaults
    and what the workload's own settings declare (amp under autocast)."""
    return [
        (wl, p)
        for wl in workloads
        for p in (probes or wl.probes or (*default_probes(), *declared_probes(wl)))
        if not probes or wl.probes is None or p in wl.probes
    ]


def follow_up_probes(
    config: Config, wl: WorkloadConfig, planned: set[str], probes: tuple[str, ...]
) -> tuple[str, ...]:
    """Probes a workload may get once the planned ones show they apply (a descriptor's
    ``follow_up``: custom_ops, when its exported graph calls a custom op); only where its probes
    were left to the defaults."""
    from perfcheck.core import probes as registry  # the descriptors

    if probes or wl.probes is not None:
        return ()
    return tuple(
        k.name
        for k in registry.kinds()
        if k.follow_up is not None
        and k.name not in planned
        and set(k.follow_up.after) <= planned
        and k.follow_up.enabled(config)
    )


def declared_probes(wl: WorkloadConfig) -> tuple[str, ...]:
    """The probes a workload asks for by what it is (a descriptor's ``asked_by``: the amp probe
    when it runs under autocast)."""
    from perfcheck.core import probes as registry

    return tuple(k.name for k in registry.kinds() if k.asked_by is not None and k.asked_by(wl))


def _key(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


# pydantic's words for a type, in the words of a YAML file (no class names).
_TYPE_WORDS = {
    "model_type": "a mapping of settings (indented `key: value` lines)",
    "model_attributes_type": "a mapping of settings (indented `key: value` lines)",
    "dict_type": "a mapping (indented `key: value` lines)",
    "list_type": "a list (`[a, b]` or `- item` lines)",
    "int_type": "a whole number, without quotes",
    "float_type": "a number, without quotes",
    "bool_type": "true or false, without quotes",
    "string_type": "text",
}


def _expectation(e: Any) -> str:
    if e["type"] == "missing":
        return "a value for this required key"
    if e["type"] in _TYPE_WORDS:
        return _TYPE_WORDS[e["type"]]
    msg = e["msg"].removeprefix("Value error, ").removeprefix("Input should be ")
    return msg.replace(", unable to interpret input", "")


def _closest(category: str) -> str:
    """' (did you mean `recompile`?)' for a misspelt finding category, else ''."""
    close = difflib.get_close_matches(category, list(finding_categories()), n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _suggestion(key: str, loc: tuple[Any, ...], root: type[BaseModel] | None = None) -> str:
    """' (did you mean `workloads`?)' for a key close to one its section knows, else ''; ``loc``
    is within ``root`` (a probe's settings model; the config's own by default)."""
    model: Any = root or Config
    for part in loc[:-1]:
        field = _field(model, part) if isinstance(part, str) else None
        if field is None:
            if isinstance(part, int):
                continue  # an item of a list: the list's model stays
            return ""
        annotation = field.annotation
        inner = getattr(annotation, "__args__", None)
        model = next((a for a in inner or () if hasattr(a, "model_fields")), annotation)
    names = [
        f.alias or n
        for n, f in getattr(model, "model_fields", {}).items()
        if n not in ("source", "probe_settings")
    ]
    if model is Config:  # the sections of perfcheck's own probes that carry their settings
        from perfcheck.core import probes

        names += [k.name for k in probes.built_in() if k.settings is not None]
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _field(model: Any, key: str) -> Any:
    """The field of ``model`` that the file's ``key`` sets (its name, or its alias: an ack's `break`)."""
    fields = getattr(model, "model_fields", {})
    return fields.get(key) or next((f for f in fields.values() if f.alias == key), None)


def _describe(
    err: ValidationError, source: str, under: tuple[str, ...] = (), root: type[BaseModel] | None = None
) -> str:
    """The errors as the user reads them: file, key, expectation. ``under``: the section the
    errors' locations are within, validated by ``root`` (a probe's settings model)."""
    lines = []
    for e in err.errors():
        key = _key((*under, *e["loc"]))
        if e["type"] == "removed_key":
            lines.append(f"{source}: {key}.{e['ctx']['key']}: {e['msg']}")
            continue
        if e["type"] == "extra_forbidden":
            lines.append(f"{source}: {key}: unknown key{_suggestion(str(e['loc'][-1]), e['loc'], root)}")
            continue
        got = e.get("input")
        shown = "" if e["type"] == "missing" or isinstance(got, dict | list) else f" (got {got!r})"
        lines.append(f"{source}: {key}: expected {_expectation(e)}{shown}")
    return "\n".join(lines)


def _load_yaml(text: str, source: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{source}:{where}: not valid YAML ({getattr(err, 'problem', err)})") from None
    if data is None:
        raise ConfigError(
            f"{source}: the file is empty; name your workloads under `workloads:` (README, "
            '"Adopting it in a repository"), or delete the file to review the built-in mlp-tiny workload'
        )
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: (top level): expected a mapping of settings, got {type(data).__name__}")
    if "probe_settings" in data or "source" in data:
        key = "probe_settings" if "probe_settings" in data else "source"
        raise ConfigError(f"{source}: {key}: unknown key")
    return dict(data)


def parse_config(text: str, source: str) -> Config:
    return _validate(_load_yaml(text, source), source)


def _validate(data: dict[str, Any], source: str) -> Config:
    sections = _probe_sections(data, source)  # takes the probes' sections out of data
    data["probe_settings"] = sections
    try:
        # Strict: a quoted "0" is text, not the number a budget needs; YAML says which it is.
        return Config.model_validate(
            {**data, "source": source}, strict=True, context={PROBE_NAMES: probe_names()}
        )
    except ValidationError as err:
        raise ConfigError(_describe(err, source)) from None


# A first adoption (base has no perfcheck.yml, so the PR's own is followed) is judged by settings
# the PR wrote. The trusted report job reads them too, so none of them may make it run, write or
# accept anything the PR chooses, nor judge more loosely than perfcheck does with no file at all.
FIRST_ADOPTION_REFUSED = {
    "plugins": "the trusted report job would import the modules it names",
    "history": "the trusted report job would write the file it names",
    "acks": "they would accept findings of the PR that adds them",
}
# (section, key, "at most" | "at least"): the default is the loosest value a first adoption may set.
_NEVER_LOOSER = (
    *(("budgets", k, "at most") for k in BudgetsConfig.model_fields if k.startswith("max_")),
    ("timing", "confidence", "at least"),  # a narrower interval passes a regression sooner
    ("profile", "min_change_pct", "at most"),  # a higher threshold hides kernel changes
)


def first_adoption_config(text: str, source: str) -> Config:
    """The PR's own perfcheck.yml where base has none, parsed so that it cannot widen the gate:
    no key of FIRST_ADOPTION_REFUSED (checked before any plugin is imported), no budget looser than
    the default, and no category's severity softer than its own. ConfigError names the key and what
    a first adoption may set."""
    data = _load_yaml(text, source)
    for key, why in FIRST_ADOPTION_REFUSED.items():
        if key in data:
            raise ConfigError(
                f"{source}: {key}: not read from a pull request's own perfcheck.yml while the base "
                f"branch has none (a first adoption): {why}. Remove it here and add it to the base "
                "branch's perfcheck.yml once this one is merged"
            )
    config = _validate(data, source)
    defaults = Config()
    for section, key, bound in _NEVER_LOOSER:
        got, default = (
            getattr(_named_section(config, section), key),
            getattr(_named_section(defaults, section), key),
        )
        if (got > default) if bound == "at most" else (got < default):
            raise ConfigError(
                f"{source}: {section}.{key}: expected {bound} {default:g} (the default) in a first "
                f"adoption, got {got:g}: while the base branch has no perfcheck.yml, the pull request "
                "that adds one cannot judge itself more loosely than perfcheck's defaults; loosen it "
                "in a later pull request, which the base branch's copy then gates"
            )
    _no_softer_severity(config, source)
    return config


_SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


def _no_softer_severity(config: Config, source: str) -> None:
    """A first adoption may make a category's findings stricter (a warning an error), never softer
    than its entry's own severity: a PR's ``matrix.<category>.severity: info`` would otherwise
    turn its own failing review into a pass (issue 45)."""
    from perfcheck.core.matrix import known

    entries = known()
    for category, entry in config.matrix.items():
        own = entries.get(category)
        if entry.severity is None or own is None:
            continue
        if _SEVERITY_RANK[entry.severity] < _SEVERITY_RANK[own.severity]:
            raise ConfigError(
                f"{source}: matrix.{category}.severity: expected {own.severity} or stricter (the "
                f"category's own) in a first adoption, got {entry.severity}: while the base branch has "
                "no perfcheck.yml, the pull request that adds one cannot judge itself more loosely than "
                "perfcheck's defaults; soften it in a later pull request, which the base branch's copy "
                "then gates"
            )


def _named_section(config: Config, name: str) -> BaseModel:
    """The config's section ``name``: one of its own, or a probe's (its defaults if not set)."""
    if name in Config.model_fields:
        return getattr(config, name)
    from perfcheck.core import probes

    kind = probes.get(name)
    section = kind.settings_of(config) if kind is not None else None
    if section is None:
        raise KeyError(name)
    return section


def _probe_sections(data: dict[str, Any], source: str) -> dict[str, BaseModel]:
    """Load the plugins ``data`` names (they add probes, categories and config sections), then take
    each probe's section (perfcheck's own and the plugins') out of ``data`` and validate it with
    the probe's settings model."""
    from perfcheck import plugins

    names = data.get("plugins", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"{source}: plugins: expected a list of module names")
    loaded = []
    for i, name in enumerate(names):
        try:
            loaded.append(plugins.load(name, reserved=frozenset(Config.model_fields)))
        except plugins.PluginError as err:
            raise ConfigError(f"{source}: plugins[{i}]: {err}") from None
    from perfcheck.core import probes

    sections: dict[str, BaseModel] = {}
    # Only perfcheck's own probes and this config's plugins own a section of it.
    for kind in [*probes.built_in(), *loaded]:
        if kind.settings is None or kind.name not in data:
            continue
        try:
            sections[kind.name] = kind.settings.model_validate(data.pop(kind.name), strict=True)
        except ValidationError as err:
            raise ConfigError(_describe(err, source, (kind.name,), kind.settings)) from None
    return sections


def find_config(tree: Path) -> Path | None:
    for name in CONFIG_NAMES:
        candidate = tree / name
        if candidate.is_file():
            return candidate
    return None


# The most of a perfcheck.yml the probe job carries to the report job (ProbeRun.head_config).
MAX_CONFIG_CHARS = 256 * 1024


@dataclass(frozen=True)
class ReviewSettings:
    """The settings of a review, where they came from (a ``ConfigOrigin``) and, where they are the
    PR's own, their text, read before any of the PR's code ran (the report job gets that copy)."""

    config: Config
    origin: str
    head_text: str | None = None


def review_config(explicit: Path | None, base: Path | None, head: Path | None) -> tuple[Config, str]:
    """read_settings' config and origin."""
    found = read_settings(explicit, base, head)
    return found.config, found.origin


def read_settings(
    explicit: Path | None, base: Path | None, head: Path | None, *, committed_only: bool = True
) -> ReviewSettings:
    """``--config``, else base's perfcheck.yml (the gate: a PR must not loosen its own), else the
    PR's own when base has none yet (the first PR adds it: first_adoption_config, as committed;
    with ``committed_only`` off, as the tree has it where that differs), else the built-in
    workload."""
    if explicit is not None:
        return ReviewSettings(load_config(explicit, None), "given")
    found = find_config(base) if base is not None and base.is_dir() else None
    if found is not None:
        return ReviewSettings(load_config(found, None), "base")
    own = head_config_text(head, committed_only) if head is not None and head.is_dir() else None
    if own is not None:
        text, source = own
        return ReviewSettings(first_adoption_config(text, source), "head", text)
    return ReviewSettings(Config(), "built-in")


def _git_top(tree: Path) -> bool:
    """Whether ``tree`` is the top of a git checkout."""
    try:
        done = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and Path(done.stdout.strip()).resolve() == tree.resolve()


def _committed(tree: Path, name: str) -> bytes | None:
    """``name`` as the checkout's HEAD commit holds it (no replace refs), or None."""
    try:
        done = subprocess.run(
            ["git", "--no-replace-objects", "-C", str(tree), "cat-file", "blob", f"HEAD:{name}"],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def head_config_text(head: Path, committed_only: bool = True) -> tuple[str, str] | None:
    """The PR's perfcheck.yml and the name to show for it, or None: from the head commit where the
    head tree is a git checkout, else from the tree. Called before any probe runs, so what the
    review follows is what the PR committed, not what its code wrote into the tree afterwards;
    a tree that disagrees with its commit is refused rather than guessed between. Without
    ``committed_only`` (a review outside GitHub Actions: someone trying the config they are
    writing) the tree's text is followed, and its name says it is not committed."""
    if not _git_top(head) or not committed_only:
        path = find_config(head)
        if path is None:
            return None
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"{path}: cannot read config ({err})") from None
        return _bounded(text, str(path)), str(path)
    committed = next(((n, t) for n in CONFIG_NAMES if (t := _committed(head, n)) is not None), None)
    on_disk = find_config(head)
    if committed is None:
        if on_disk is not None:
            raise ConfigError(
                f"{on_disk}: not in the head commit; while the base branch has no perfcheck.yml the "
                "review follows the head commit's: commit it, or pass --config"
            )
        return None
    name, blob = committed
    source = f"{head / name} (as committed)"
    if on_disk is None or on_disk != head / name or on_disk.read_bytes() != blob:
        raise ConfigError(
            f"{on_disk or head / name}: differs from the head commit's {name}; while the base branch has "
            "no perfcheck.yml the review follows the head commit's: commit the change, or pass --config"
        )
    try:
        return _bounded(blob.decode("utf-8"), source), source
    except UnicodeDecodeError as err:
        raise ConfigError(f"{source}: cannot read config ({err})") from None


def _bounded(text: str, source: str) -> str:
    if len(text) > MAX_CONFIG_CHARS:
        raise ConfigError(f"{source}: expected at most {MAX_CONFIG_CHARS} characters, got {len(text)}")
    return text


def load_config(explicit: Path | None, tree: Path | None) -> Config:
    """``--config`` if given, else the first of CONFIG_NAMES in ``tree``, else the defaults."""
    path = explicit if explicit is not None else (find_config(tree) if tree is not None else None)
    if path is None:
        return Config()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config ({err.strerror})") from None
    return parse_config(text, str(path))
