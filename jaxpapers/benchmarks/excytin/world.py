"""A seeded Sentinel/Defender tenant: users, hosts, kill chains, alerts and log tables.

ExCyTIn-Bench's data are the logs of a controlled Azure tenant under attack (57 tables exported
from Microsoft Sentinel). Nothing of that can be downloaded here, so :func:`generate_tenant`
builds a tenant from a seed: an organisation (users with UPNs, SIDs and Entra object ids; hosts
with device ids and addresses), benign activity in every log table, and ``incidents`` attacks,
each a kill chain whose stages write the log rows an analyst would find (an email delivered, a
URL clicked, a payload written and run, LSASS read, a remote logon, a beacon) and raise a
Sentinel alert whose ``Entities`` JSON follows Sentinel's schema (``$id``/``$ref``, ``Type`` as
Sentinel writes it, e.g. ``mailMessage``). Alerts are mirrored into ``AlertInfo`` /
``AlertEvidence`` (Defender XDR) and grouped into ``SecurityIncident`` rows. Every identifier of
an alert entity also occurs in a log row (so the log layer, without the alert tables, can answer
the same questions).

Kill chains (one picked per incident, stages randomly kept/repeated):
``phish`` (email -> click -> payload -> persistence -> credential theft -> lateral movement ->
C2 -> exfiltration) and ``identity`` (password spray -> risky sign-in -> mailbox rule ->
forwarding / cloud-app download). Consecutive stages share an entity (the URL, the victim, the
compromised host, the stolen admin), so investigation paths are multi-hop like the paper's.

Determinism: one ``random.Random(seed)``; no salted string hashing, no set iteration order,
no clock. The same seed gives the same tables, byte for byte, in any process.

>>> t = generate_tenant(0, incidents=2, noise_rows=5)
>>> len(t.tables) >= 25, len(t.incidents)
(True, 2)
>>> t.tables["SecurityAlert"][0]["Entities"][:2]
'[{'
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import ipaddress
import json
import random
from collections.abc import Mapping

__all__ = ["SCHEMA", "ALERT_TABLES", "ENTITY_COLUMNS", "Tenant", "generate_tenant"]

# the table definitions live in schema.py; re-exported here for the callers of world
from jaxpapers.benchmarks.excytin.schema import ALERT_TABLES, ENTITY_COLUMNS, SCHEMA

_FIRST = ("alex", "blake", "casey", "dana", "eli", "fran", "gale", "harper", "ivy", "jules",
          "kai", "lee", "morgan", "noel", "oak", "pat", "quinn", "reese", "sam", "toni", "uma",
          "val", "wren", "yael", "zion", "ari", "bo", "cleo", "dev", "emery")
_LAST = ("adams", "baker", "chen", "diaz", "evans", "fischer", "garcia", "haddad", "ito",
         "jensen", "kowalski", "lopez", "moreau", "nakamura", "okafor", "patel", "quist",
         "rossi", "silva", "tanaka", "ueda", "varga", "weber", "xu", "young", "zhou")
_DEPTS = ("finance", "hr", "sales", "eng", "legal", "ops", "it", "marketing")
_WORDS = ("alpha", "harbor", "quartz", "falcon", "nimbus", "ember", "cobalt", "meadow", "orbit",
          "summit", "vertex", "willow", "canyon", "delta", "lumen", "pylon", "ridge", "tundra",
          "zephyr", "onyx", "atlas", "birch", "cedar", "dune")
_TLDS = ("com", "net", "io", "biz", "info", "co")
_DOCS = ("invoice", "payroll", "statement", "contract", "shipping", "resume", "order", "receipt")
_TOOLS = ("procdump64.exe", "rundll32.exe", "nanodump.exe", "mimi.exe", "lsassy.exe")
_APPS = ("Office 365 Exchange Online", "Microsoft Teams", "SharePoint Online", "Azure Portal",
         "OneDrive")
_LOCATIONS = ("US", "DE", "GB", "NL", "FR", "JP", "BR", "SG", "RU", "NG", "KP", "IR")


@dataclasses.dataclass(frozen=True)
class Incident:
    """One attack: its ``SecurityIncident`` number, chain kind and alert ids in time order."""

    number: int
    kind: str
    title: str
    alert_ids: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Tenant:
    """A generated tenant.

    Attributes:
      seed: the seed it was generated from.
      domain: the organisation's UPN suffix.
      tables: table name -> list of row dicts (every column of :data:`SCHEMA` present).
      incidents: the attacks, in order.
    """

    seed: int
    domain: str
    tables: Mapping[str, list[dict]]
    incidents: tuple[Incident, ...]

    def alerts(self, incident: int | None = None) -> list[dict]:
        """``SecurityAlert`` rows (of one incident number, or all)."""
        rows = self.tables["SecurityAlert"]
        if incident is None:
            return list(rows)
        inc = next((i for i in self.incidents if i.number == incident), None)
        if inc is None:
            raise ValueError(f"incident {incident} is not in this tenant")
        ids = set(inc.alert_ids)
        return [r for r in rows if r["SystemAlertId"] in ids]


@dataclasses.dataclass
class _User:
    name: str
    display: str
    upn: str
    sid: str
    aad_id: str
    dept: str


@dataclasses.dataclass
class _Host:
    name: str
    device_id: str
    aad_id: str
    ip: str
    os: str


class _Gen:
    """Holds the RNG, the clock and the tables while a tenant is built."""

    def __init__(self, seed: int, domain: str, start: _dt.datetime):
        self.r = random.Random(seed)
        self.domain = domain
        self.t0 = start
        self.tables: dict[str, list[dict]] = {name: [] for name in SCHEMA}
        self.report_id = 1000
        self.used_ips: set[str] = set()

    # ----- identifiers -----
    def hex(self, n: int) -> str:
        return "".join(self.r.choice("0123456789abcdef") for _ in range(n))

    def guid(self) -> str:
        h = self.hex(32)
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[self.r.randrange(4)]}{h[17:20]}-{h[20:]}"

    def public_ip(self) -> str:
        while True:
            ip = ".".join(str(self.r.randint(1, 254)) for _ in range(4))
            a = ipaddress.ip_address(ip)
            if a.is_global and ip not in ("8.8.8.8",) and ip not in self.used_ips:
                self.used_ips.add(ip)
                return ip

    def private_ip(self) -> str:
        while True:
            ip = f"10.{self.r.randint(0, 3)}.{self.r.randint(0, 254)}.{self.r.randint(2, 254)}"
            if ip not in self.used_ips:
                self.used_ips.add(ip)
                return ip

    def domain_name(self) -> str:
        return (f"{self.r.choice(_WORDS)}-{self.r.choice(_WORDS)}{self.r.randint(1, 99)}."
                f"{self.r.choice(_TLDS)}")

    def time(self, minutes: float) -> str:
        t = self.t0 + _dt.timedelta(minutes=minutes)
        return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"

    def add(self, table: str, t: float, **cols) -> dict:
        unknown = [c for c in cols if c not in SCHEMA[table]]
        if unknown:  # a generator bug, never user input
            raise KeyError(f"{table} has no columns {unknown}")
        row = {c: None for c in SCHEMA[table]}
        row["TimeGenerated" if "TimeGenerated" in row else "Timestamp"] = self.time(t)
        row.update(cols)
        if "ReportId" in row and row["ReportId"] is None:
            self.report_id += 1
            row["ReportId"] = self.report_id
        self.tables[table].append(row)
        return row


def _make_org(g: _Gen, n_users: int, n_hosts: int) -> tuple[list[_User], list[_Host]]:
    users, names = [], set()
    domain_sid = "-".join(str(g.r.randint(10 ** 8, 4 * 10 ** 9)) for _ in range(3))
    while len(users) < n_users:
        f, last = g.r.choice(_FIRST), g.r.choice(_LAST)
        name = f"{f}.{last}"
        if name in names:
            continue
        names.add(name)
        users.append(_User(name, f"{f.title()} {last.title()}", f"{name}@{g.domain}",
                           f"S-1-5-21-{domain_sid}-{1100 + len(users)}", g.guid(),
                           g.r.choice(_DEPTS)))
    hosts, hnames = [], set()
    while len(hosts) < n_hosts:
        kind = "srv" if len(hosts) % 5 == 0 else "ws"
        name = f"{kind}-{g.r.choice(_DEPTS)}-{g.r.randint(1, 99):02d}"
        if name in hnames:
            continue
        hnames.add(name)
        os_ = "WindowsServer2022" if kind == "srv" else "Windows11"
        hosts.append(_Host(name, g.hex(40), g.guid(), g.private_ip(), os_))
    return users, hosts


def _account(u: _User) -> dict:
    name, suffix = u.upn.split("@")
    return {"Type": "account", "Name": name, "UPNSuffix": suffix, "Sid": u.sid,
            "AadUserId": u.aad_id, "DisplayName": u.display}


def _host(h: _Host) -> dict:
    return {"Type": "host", "HostName": h.name, "AadDeviceId": h.aad_id,
            "MdatpDeviceId": h.device_id, "OSFamily": "Windows"}


class _Alerts:
    """Builds Sentinel alerts (with Entities JSON) and their XDR mirrors."""

    def __init__(self, g: _Gen):
        self.g = g

    def raise_(self, t: float, name: str, severity: str, tactic: str, technique: str,
               description: str, entities: list[dict]) -> str:
        g = self.g
        alert_id = g.guid()
        vendor_id = "da" + g.hex(16) + "_" + str(g.r.randint(10 ** 8, 10 ** 9))
        items, n = [], 1
        for e in entities:
            n += 1
            item = {"$id": str(n), **{k: v for k, v in e.items() if not k.startswith("_")}}
            if e["Type"] == "process":  # Sentinel nests the image file
                n += 1
                item["ImageFile"] = {"$id": str(n), "Type": "file",
                                     "Name": e.get("_image", "unknown.exe")}
                # exports carry both names of the creation time; the official rules read
                # CreatedTimeUtc
                item["CreatedTimeUtc"] = item["CreationTimeUtc"]
            items.append(item)
        # Sentinel repeats entities as back-references; the graph builder skips them.
        refs = [{"$ref": it["$id"]} for it in items if g.r.random() < 0.5]
        compromised = next((e.get("HostName") for e in entities if e["Type"] == "host"), None)
        g.add("SecurityAlert", t, AlertName=name, AlertSeverity=severity,
              Description=description, ProviderName="MDATP", VendorOriginalId=vendor_id,
              SystemAlertId=alert_id, CompromisedEntity=compromised, Tactics=tactic,
              Techniques=json.dumps([technique]), Entities=json.dumps(items + refs),
              StartTime=g.time(t - 1), EndTime=g.time(t))
        g.add("AlertInfo", t, AlertId=vendor_id, Title=name, Category=tactic,
              Severity=severity, ServiceSource="Microsoft Defender for Endpoint",
              DetectionSource="EDR", AttackTechniques=json.dumps([technique]))
        for e in entities:
            cols = _evidence_columns(e)
            g.add("AlertEvidence", t, AlertId=vendor_id, Title=name,
                  EntityType=_EVIDENCE_TYPE.get(e["Type"], e["Type"]),
                  EvidenceRole=e.get("_role", "Related"), **cols)
        for e in entities:
            e.pop("_role", None)
        return alert_id


_EVIDENCE_TYPE = {"account": "User", "host": "Machine", "ip": "Ip", "url": "Url",
                  "file": "File", "filehash": "File", "process": "Process",
                  "mailbox": "Mailbox", "mailMessage": "MailMessage",
                  "cloud-application": "CloudApplication"}


def _evidence_columns(e: dict) -> dict:
    t = e["Type"]
    if t == "account":
        return {"AccountName": e["Name"], "AccountUpn": f"{e['Name']}@{e['UPNSuffix']}",
                "AccountSid": e["Sid"], "AccountObjectId": e["AadUserId"]}
    if t == "host":
        return {"DeviceName": e["HostName"], "DeviceId": e["MdatpDeviceId"]}
    if t == "ip":
        return {"RemoteIP": e["Address"]}
    if t == "url":
        return {"RemoteUrl": e["Url"]}
    if t == "file":
        return {"FileName": e["Name"]}
    if t == "filehash":
        return {"SHA256": e["Value"]}
    if t == "process":
        return {"ProcessCommandLine": e["CommandLine"]}
    if t == "mailbox":
        return {"AccountUpn": e["MailboxPrimaryAddress"]}
    if t == "mailMessage":
        return {"NetworkMessageId": e.get("NetworkMessageId"), "EmailSubject": e.get("Subject")}
    return {}


# ----------------------------------------------------------------------------- kill chains
def _phish_chain(g: _Gen, al: _Alerts, users, hosts, t: float) -> tuple[str, list[str]]:
    r = g.r
    victim = r.choice(users)
    vhost = r.choice([h for h in hosts if h.name.startswith("ws")] or hosts)
    admin = r.choice([u for u in users if u is not victim])
    target = r.choice([h for h in hosts if h is not vhost])
    att_domain = g.domain_name()
    sender = f"{r.choice(('billing', 'hr-notice', 'docs', 'support'))}@{att_domain}"
    mail_ip = g.public_ip()
    phish_url = f"https://{att_domain}/{r.choice(_DOCS)}/{g.hex(8)}"
    egress_ip = g.public_ip()
    doc = f"{r.choice(_DOCS)}_{r.randint(1000, 9999)}.docm"
    payload = f"{r.choice(('update', 'svc', 'helper', 'sync'))}{r.randint(10, 99)}.exe"
    payload_hash = g.hex(64)
    c2_domain = g.domain_name()
    c2_ip = g.public_ip()
    msg_id = g.guid()
    subject = f"{r.choice(_DOCS).title()} #{r.randint(10000, 99999)}"
    ids, keep = [], lambda p: r.random() < p
    # 1. delivery: a campaign to the victim and one to three colleagues (one alert per message)
    others = r.sample([u for u in users if u is not victim and u is not admin], r.randint(1, 3))
    clickers = []
    for i, rcpt in enumerate([victim] + others):
        mid = msg_id if i == 0 else g.guid()
        tm = t + 0.2 * i
        g.add("EmailEvents", tm, NetworkMessageId=mid,
              InternetMessageId=f"<{g.hex(12)}@mail>", SenderFromAddress=sender,
              SenderMailFromAddress=sender, SenderIPv4=mail_ip, RecipientEmailAddress=rcpt.upn,
              Subject=subject, DeliveryAction="Delivered", DeliveryLocation="Inbox",
              ThreatTypes="Phish", AttachmentCount=0, UrlCount=1)
        g.add("EmailUrlInfo", tm, NetworkMessageId=mid, Url=phish_url, UrlDomain=att_domain,
              UrlLocation="Body")
        ids.append(al.raise_(tm + 2, "Email messages containing malicious URL removed after "
                             "delivery", "Medium", "InitialAccess", "T1566.002",
                             f"A message with a malicious URL was delivered to {rcpt.upn}.",
                             [{"Type": "mailMessage", "Recipient": rcpt.upn, "Sender": sender,
                               "SenderIP": mail_ip, "NetworkMessageId": mid,
                               "Subject": subject},
                              {"Type": "mailbox", "MailboxPrimaryAddress": rcpt.upn},
                              {"Type": "url", "Url": phish_url}]))
        if i == 0 or r.random() < 0.5:
            clickers.append((rcpt, mid))
    t += r.uniform(5, 60)
    # 2. clicks (the victim's leads on; the colleagues' go no further)
    for i, (rcpt, mid) in enumerate(clickers):
        tc = t + 3 * i
        ip = egress_ip if i == 0 else g.public_ip()
        g.add("UrlClickEvents", tc, Url=phish_url, ActionType="ClickAllowed",
              AccountUpn=rcpt.upn, NetworkMessageId=mid, IPAddress=ip, IsClickedThrough=1,
              Workload="Email")
        ids.append(al.raise_(tc + 1, "A potentially malicious URL click was detected", "High",
                             "InitialAccess", "T1204.001",
                             f"{rcpt.upn} clicked a URL that was later found malicious.",
                             [{**_account(rcpt), "_role": "Impacted"},
                              {"Type": "url", "Url": phish_url},
                              {"Type": "ip", "Address": ip}]))
    g.add("DeviceNetworkEvents", t, DeviceId=vhost.device_id, DeviceName=vhost.name,
          ActionType="ConnectionSuccess", RemoteIP=g.public_ip(), RemotePort=443,
          RemoteUrl=phish_url, LocalIP=vhost.ip, LocalPort=r.randint(49152, 65535),
          Protocol="Tcp", InitiatingProcessFileName="msedge.exe",
          InitiatingProcessAccountName=victim.name)
    t += r.uniform(2, 20)
    # 3. payload written and run
    g.add("DeviceFileEvents", t, DeviceId=vhost.device_id, DeviceName=vhost.name,
          ActionType="FileCreated", FileName=doc, FolderPath=f"C:\\Users\\{victim.name}\\"
          f"Downloads\\{doc}", SHA256=g.hex(64), FileSize=r.randint(20000, 90000),
          FileOriginUrl=phish_url, InitiatingProcessFileName="msedge.exe",
          InitiatingProcessAccountName=victim.name)
    folder = f"C:\\Users\\{victim.name}\\AppData\\Local\\Temp"
    g.add("DeviceFileEvents", t + 0.5, DeviceId=vhost.device_id, DeviceName=vhost.name,
          ActionType="FileCreated", FileName=payload, FolderPath=f"{folder}\\{payload}",
          SHA256=payload_hash, FileSize=r.randint(100000, 900000),
          InitiatingProcessFileName="winword.exe", InitiatingProcessAccountName=victim.name)
    pid = r.randint(1000, 9999)
    cmd = f"\"{folder}\\{payload}\" /install /q"
    created = g.time(t + 1)
    g.add("DeviceProcessEvents", t + 1, DeviceId=vhost.device_id, DeviceName=vhost.name,
          ActionType="ProcessCreated", FileName=payload, FolderPath=f"{folder}\\{payload}",
          SHA256=payload_hash, ProcessId=pid, ProcessCommandLine=cmd,
          ProcessCreationTime=created, AccountName=victim.name, AccountDomain=g.domain,
          AccountUpn=victim.upn, AccountSid=victim.sid, InitiatingProcessFileName="winword.exe",
          InitiatingProcessCommandLine=f"\"WINWORD.EXE\" /n \"{doc}\"")
    ids.append(al.raise_(t + 2, "Suspicious process launched by an Office application",
                         "High", "Execution", "T1204.002",
                         f"winword.exe started {payload} on {vhost.name}.",
                         [{**_account(victim)}, {**_host(vhost), "_role": "Impacted"},
                          {"Type": "file", "Name": payload, "Directory": folder},
                          {"Type": "filehash", "Algorithm": "SHA256", "Value": payload_hash},
                          {"Type": "process", "ProcessId": str(pid), "CreationTimeUtc": created,
                           "CommandLine": cmd, "_image": payload}]))
    t += r.uniform(2, 30)
    # 4. persistence (optional)
    if keep(0.6):
        task = f"{r.choice(_WORDS).title()}Update"
        cmd2 = f"schtasks /create /tn {task} /tr \"{folder}\\{payload}\" /sc onlogon /f"
        pid2 = r.randint(1000, 9999)
        created2 = g.time(t)
        g.add("DeviceProcessEvents", t, DeviceId=vhost.device_id, DeviceName=vhost.name,
              ActionType="ProcessCreated", FileName="schtasks.exe",
              FolderPath="C:\\Windows\\System32\\schtasks.exe", SHA256=g.hex(64), ProcessId=pid2,
              ProcessCommandLine=cmd2, ProcessCreationTime=created2, AccountName=victim.name,
              AccountDomain=g.domain, AccountUpn=victim.upn, AccountSid=victim.sid,
              InitiatingProcessFileName=payload, InitiatingProcessCommandLine=cmd)
        g.add("DeviceRegistryEvents", t + 0.2, DeviceId=vhost.device_id, DeviceName=vhost.name,
              ActionType="RegistryValueSet",
              RegistryKey=f"HKLM\\SOFTWARE\\Microsoft\\Windows NT\\CurrentVersion\\Schedule"
              f"\\TaskCache\\Tree\\{task}", RegistryValueName="Id",
              RegistryValueData="{" + g.guid() + "}", InitiatingProcessFileName="schtasks.exe",
              InitiatingProcessAccountName=victim.name)
        ids.append(al.raise_(t + 1, "Suspicious scheduled task created", "Medium",
                             "Persistence", "T1053.005",
                             f"A scheduled task {task} runs {payload} at logon.",
                             [{**_host(vhost), "_role": "Impacted"},
                              {"Type": "process", "ProcessId": str(pid2),
                               "CreationTimeUtc": created2, "CommandLine": cmd2,
                               "_image": "schtasks.exe"}]))
        t += r.uniform(5, 40)
    # 5. credential theft: the admin's credentials are read from LSASS on the victim's host
    tool = r.choice(_TOOLS)
    dump = f"{r.choice(_WORDS)}{r.randint(1, 9)}.dmp"
    cmd3 = f"{tool} -ma lsass.exe C:\\ProgramData\\{dump}"
    pid3 = r.randint(1000, 9999)
    created3 = g.time(t)
    g.add("DeviceProcessEvents", t, DeviceId=vhost.device_id, DeviceName=vhost.name,
          ActionType="ProcessCreated", FileName=tool, FolderPath=f"C:\\ProgramData\\{tool}",
          SHA256=g.hex(64), ProcessId=pid3, ProcessCommandLine=cmd3, ProcessCreationTime=created3,
          AccountName=victim.name, AccountDomain=g.domain, AccountUpn=victim.upn,
          AccountSid=victim.sid, InitiatingProcessFileName=payload,
          InitiatingProcessCommandLine=cmd)
    g.add("DeviceEvents", t + 0.1, DeviceId=vhost.device_id, DeviceName=vhost.name,
          ActionType="OpenProcessApiCall", FileName="lsass.exe", ProcessCommandLine=cmd3,
          AccountName=admin.name, AdditionalFields=json.dumps({"DesiredAccess": 4112}))
    g.add("DeviceLogonEvents", t - 3, DeviceId=vhost.device_id, DeviceName=vhost.name,
          ActionType="LogonSuccess", LogonType="RemoteInteractive", AccountName=admin.name,
          AccountDomain=g.domain, AccountSid=admin.sid, RemoteIP=g.private_ip(),
          Protocol="Kerberos")
    ids.append(al.raise_(t + 1, "Suspected credential theft activity (LSASS memory access)",
                         "High", "CredentialAccess", "T1003.001",
                         f"A process on {vhost.name} read the memory of lsass.exe.",
                         [{**_host(vhost), "_role": "Impacted"},
                          {"Type": "process", "ProcessId": str(pid3),
                           "CreationTimeUtc": created3, "CommandLine": cmd3, "_image": tool},
                          {**_account(admin), "_role": "Impacted"}]))
    t += r.uniform(10, 90)
    # 6. lateral movement with the stolen admin credentials
    g.add("DeviceLogonEvents", t, DeviceId=target.device_id, DeviceName=target.name,
          ActionType="LogonSuccess", LogonType="Network", AccountName=admin.name,
          AccountDomain=g.domain, AccountSid=admin.sid, RemoteIP=vhost.ip,
          RemoteDeviceName=vhost.name, Protocol="NTLM")
    g.add("IdentityLogonEvents", t, ActionType="LogonSuccess", LogonType="Resource access",
          Protocol="Ntlm", AccountName=admin.name, AccountDomain=g.domain, AccountUpn=admin.upn,
          AccountSid=admin.sid, DeviceName=vhost.name, IPAddress=vhost.ip,
          DestinationDeviceName=target.name, DestinationIPAddress=target.ip)
    ids.append(al.raise_(t + 2, "Suspicious remote logon using pass-the-hash", "High",
                         "LateralMovement", "T1550.002",
                         f"{admin.name} logged on to {target.name} over the network.",
                         [{**_account(admin)}, {"Type": "ip", "Address": vhost.ip},
                          {**_host(vhost)}, {**_host(target), "_role": "Impacted"}]))
    t += r.uniform(5, 60)
    # 7. command and control, repeated beacons (one alert per burst)
    for b in range(r.choice((1, 1, 2, 3))):
        tb = t + 60 * b
        g.add("DeviceNetworkEvents", tb, DeviceId=target.device_id, DeviceName=target.name,
              ActionType="ConnectionSuccess", RemoteIP=c2_ip, RemotePort=443,
              RemoteUrl=c2_domain, LocalIP=target.ip, LocalPort=r.randint(49152, 65535),
              Protocol="Tcp", InitiatingProcessFileName="rundll32.exe",
              InitiatingProcessAccountName=admin.name)
        g.add("CommonSecurityLog", tb, DeviceVendor="Palo Alto Networks", DeviceProduct="PAN-OS",
              Activity="TRAFFIC", SourceIP=target.ip, DestinationIP=c2_ip, DestinationPort=443,
              RequestURL=c2_domain, DeviceAction="allow")
        ids.append(al.raise_(tb + 1, "Communication with a known command and control server",
                             "High", "CommandAndControl", "T1071.001",
                             f"{target.name} connected to {c2_domain}.",
                             [{**_host(target), "_role": "Impacted"},
                              {"Type": "ip", "Address": c2_ip},
                              {"Type": "url", "Url": c2_domain}]))
    g.add("ThreatIntelligenceIndicator", t, IndicatorId=g.guid(), ThreatType="C2",
          NetworkIP=c2_ip, DomainName=c2_domain, ConfidenceScore=r.randint(60, 100),
          Description="Known command and control infrastructure", Active=1)
    t += r.uniform(30, 120)
    # 8. exfiltration (optional)
    if keep(0.5):
        archive = f"{r.choice(_WORDS)}_{r.randint(100, 999)}.zip"
        exfil_ip = g.public_ip()
        g.add("DeviceFileEvents", t, DeviceId=target.device_id, DeviceName=target.name,
              ActionType="FileCreated", FileName=archive, FolderPath=f"C:\\Temp\\{archive}",
              SHA256=g.hex(64), FileSize=r.randint(10 ** 7, 10 ** 8),
              InitiatingProcessFileName="7z.exe", InitiatingProcessAccountName=admin.name)
        g.add("DeviceNetworkEvents", t + 2, DeviceId=target.device_id, DeviceName=target.name,
              ActionType="ConnectionSuccess", RemoteIP=exfil_ip, RemotePort=8443,
              LocalIP=target.ip, LocalPort=r.randint(49152, 65535), Protocol="Tcp",
              InitiatingProcessFileName="curl.exe", InitiatingProcessAccountName=admin.name)
        ids.append(al.raise_(t + 3, "Possible data exfiltration to an unfamiliar address",
                             "Medium", "Exfiltration", "T1041",
                             f"A large archive left {target.name}.",
                             [{**_host(target), "_role": "Impacted"},
                              {"Type": "file", "Name": archive, "Directory": "C:\\Temp"},
                              {"Type": "ip", "Address": exfil_ip}]))
    return f"Multi-stage incident involving {victim.name} and {target.name}", ids


def _identity_chain(g: _Gen, al: _Alerts, users, hosts, t: float) -> tuple[str, list[str]]:
    r = g.r
    spray_ip = g.public_ip()
    sprayed = r.sample(users, min(len(users), r.randint(3, 8)))
    victim = sprayed[0]
    login_ip = g.public_ip()
    ids = []
    # 1. password spray: one alert per wave of failures
    for w in range(r.choice((1, 2, 3))):
        tw = t + 30 * w
        for u in sprayed:
            g.add("SigninLogs", tw + r.uniform(0, 5), UserPrincipalName=u.upn,
                  UserDisplayName=u.display, UserId=u.aad_id,
                  AppDisplayName=r.choice(_APPS), AppId=g.guid(), IPAddress=spray_ip,
                  Location=r.choice(_LOCATIONS[6:]), ResultType="50126",
                  ResultDescription="Invalid username or password", ClientAppUsed="Browser",
                  RiskLevelDuringSignIn="medium", RiskState="atRisk",
                  ConditionalAccessStatus="notApplied", CorrelationId=g.guid())
        ids.append(al.raise_(tw + 6, "Password spray attack", "Medium", "CredentialAccess",
                             "T1110.003",
                             f"Failed sign-ins for {len(sprayed)} accounts from one address.",
                             [{"Type": "ip", "Address": spray_ip}]
                             + [{**_account(u)} for u in sprayed]))
    t += r.uniform(60, 240)
    # 2. the victim's password worked, from a new address
    g.add("SigninLogs", t, UserPrincipalName=victim.upn, UserDisplayName=victim.display,
          UserId=victim.aad_id, AppDisplayName="Office 365 Exchange Online", AppId=g.guid(),
          IPAddress=login_ip, Location=r.choice(_LOCATIONS[6:]), ResultType="0",
          ResultDescription="Success", ClientAppUsed="Browser", RiskLevelDuringSignIn="high",
          RiskState="atRisk", ConditionalAccessStatus="notApplied", CorrelationId=g.guid())
    ids.append(al.raise_(t + 2, "Unfamiliar sign-in properties", "Medium", "InitialAccess",
                         "T1078.004", f"{victim.upn} signed in from an unfamiliar location.",
                         [{**_account(victim), "_role": "Impacted"},
                          {"Type": "ip", "Address": login_ip}]))
    t += r.uniform(5, 60)
    # 3. inbox rule hiding replies, set from the attacker's address
    rule = f"{r.choice(_WORDS)}{r.randint(1, 99)}"
    g.add("OfficeActivity", t, Operation="New-InboxRule", UserId=victim.upn, ClientIP=login_ip,
          OfficeWorkload="Exchange", ResultStatus="True",
          Parameters=json.dumps([{"Name": "Name", "Value": rule},
                                 {"Name": "MoveToFolder", "Value": "RSS Subscriptions"}]),
          MailboxOwnerUPN=victim.upn, OfficeObjectId=rule)
    g.add("CloudAppEvents", t, ActionType="New-InboxRule",
          Application="Microsoft Exchange Online", ApplicationId=20893,
          AccountDisplayName=victim.display, AccountObjectId=victim.aad_id, IPAddress=login_ip,
          CountryCode=r.choice(_LOCATIONS[6:]), ObjectName=rule)
    ids.append(al.raise_(t + 1, "Suspicious inbox manipulation rule", "Medium",
                         "DefenseEvasion", "T1564.008",
                         f"An inbox rule {rule} was created for {victim.upn}.",
                         [{"Type": "mailbox", "MailboxPrimaryAddress": victim.upn},
                          {"Type": "ip", "Address": login_ip},
                          {"Type": "cloud-application", "AppId": 20893,
                           "Name": "Microsoft Exchange Online"}]))
    t += r.uniform(10, 120)
    # 4. forwarding to an outside mailbox, or a mass download (one of them, or both)
    ext = f"{r.choice(_FIRST)}.{r.choice(_WORDS)}@{g.domain_name()}"
    if r.random() < 0.7:
        g.add("OfficeActivity", t, Operation="Set-Mailbox", UserId=victim.upn,
              ClientIP=login_ip, OfficeWorkload="Exchange", ResultStatus="True",
              Parameters=json.dumps([{"Name": "ForwardingSmtpAddress", "Value": ext}]),
              MailboxOwnerUPN=victim.upn, OfficeObjectId=victim.upn)
        msg_id = g.guid()
        subject = f"FW: {r.choice(_DOCS).title()} {r.randint(100, 999)}"
        g.add("EmailEvents", t + 5, NetworkMessageId=msg_id,
              InternetMessageId=f"<{g.hex(12)}@mail>", SenderFromAddress=victim.upn,
              SenderMailFromAddress=victim.upn, SenderIPv4=g.public_ip(),
              RecipientEmailAddress=ext, Subject=subject, DeliveryAction="Delivered",
              DeliveryLocation="External", ThreatTypes="", AttachmentCount=1, UrlCount=0)
        ids.append(al.raise_(t + 6, "Suspicious email forwarding activity", "Medium",
                             "Exfiltration", "T1114.003",
                             f"Mail of {victim.upn} is forwarded outside the organisation.",
                             [{"Type": "mailbox", "MailboxPrimaryAddress": victim.upn},
                              {"Type": "mailMessage", "Recipient": ext,
                               "Sender": victim.upn, "NetworkMessageId": msg_id,
                               "Subject": subject}]))
        t += r.uniform(10, 60)
    if r.random() < 0.6:
        dl_ip = g.public_ip()
        for _ in range(r.randint(3, 6)):
            g.add("CloudAppEvents", t + r.uniform(0, 10), ActionType="FileDownloaded",
                  Application="Microsoft SharePoint Online", ApplicationId=20892,
                  AccountDisplayName=victim.display, AccountObjectId=victim.aad_id,
                  IPAddress=dl_ip, CountryCode=r.choice(_LOCATIONS[6:]),
                  ObjectName=f"{r.choice(_DOCS)}_{r.randint(1, 999)}.xlsx")
        ids.append(al.raise_(t + 12, "Mass download by a single user", "Medium", "Collection",
                             "T1530", f"{victim.display} downloaded many files.",
                             [{**_account(victim)}, {"Type": "ip", "Address": dl_ip},
                              {"Type": "cloud-application", "AppId": 20892,
                               "Name": "Microsoft SharePoint Online"}]))
    g.add("AuditLogs", t, OperationName="Update user", Category="UserManagement",
          Result="success", InitiatedBy=json.dumps({"user": {"userPrincipalName": victim.upn,
                                                             "ipAddress": login_ip}}),
          TargetResources=json.dumps([{"userPrincipalName": victim.upn}]),
          CorrelationId=g.guid())
    return f"Account compromise of {victim.upn}", ids


_CHAINS = {"phish": _phish_chain, "identity": _identity_chain}


def _noise(g: _Gen, users, hosts, rows: int, span_min: float) -> None:
    """Benign activity in every log table (never an alert)."""
    r = g.r
    sites = [g.domain_name() for _ in range(12)]
    for _ in range(rows):
        t = r.uniform(0, span_min)
        u, h = r.choice(users), r.choice(hosts)
        site = r.choice(sites)
        g.add("SigninLogs", t, UserPrincipalName=u.upn, UserDisplayName=u.display,
              UserId=u.aad_id, AppDisplayName=r.choice(_APPS), AppId=g.guid(),
              IPAddress=f"203.0.113.{r.randint(1, 30)}", Location="US", ResultType="0",
              ResultDescription="Success", ClientAppUsed="Browser", RiskLevelDuringSignIn="none",
              RiskState="none", ConditionalAccessStatus="success", CorrelationId=g.guid())
        g.add("AADNonInteractiveUserSignInLogs", t, UserPrincipalName=u.upn, UserId=u.aad_id,
              AppDisplayName=r.choice(_APPS), IPAddress=f"203.0.113.{r.randint(1, 30)}",
              ResultType="0", CorrelationId=g.guid())
        exe = r.choice(("chrome.exe", "outlook.exe", "teams.exe", "excel.exe", "svchost.exe"))
        g.add("DeviceProcessEvents", t, DeviceId=h.device_id, DeviceName=h.name,
              ActionType="ProcessCreated", FileName=exe, FolderPath=f"C:\\Program Files\\{exe}",
              SHA256=g.hex(64), ProcessId=r.randint(1000, 9999), ProcessCommandLine=exe,
              ProcessCreationTime=g.time(t), AccountName=u.name, AccountDomain=g.domain,
              AccountUpn=u.upn, AccountSid=u.sid, InitiatingProcessFileName="explorer.exe")
        g.add("DeviceNetworkEvents", t, DeviceId=h.device_id, DeviceName=h.name,
              ActionType="ConnectionSuccess", RemoteIP=f"198.51.100.{r.randint(1, 254)}",
              RemotePort=443, RemoteUrl=site, LocalIP=h.ip,
              LocalPort=r.randint(49152, 65535), Protocol="Tcp",
              InitiatingProcessFileName=exe, InitiatingProcessAccountName=u.name)
        doc = f"{r.choice(_DOCS)}_{r.randint(1, 999)}.{r.choice(('docx', 'xlsx', 'pdf'))}"
        g.add("DeviceFileEvents", t, DeviceId=h.device_id, DeviceName=h.name,
              ActionType=r.choice(("FileCreated", "FileModified")), FileName=doc,
              FolderPath=f"C:\\Users\\{u.name}\\Documents\\{doc}", SHA256=g.hex(64),
              FileSize=r.randint(1000, 10 ** 6), InitiatingProcessFileName=exe,
              InitiatingProcessAccountName=u.name)
        g.add("DeviceLogonEvents", t, DeviceId=h.device_id, DeviceName=h.name,
              ActionType="LogonSuccess", LogonType="Interactive", AccountName=u.name,
              AccountDomain=g.domain, AccountSid=u.sid, Protocol="Kerberos")
        g.add("DeviceRegistryEvents", t, DeviceId=h.device_id, DeviceName=h.name,
              ActionType="RegistryValueSet",
              RegistryKey="HKCU\\Software\\Microsoft\\Office\\16.0\\Common",
              RegistryValueName="Theme", RegistryValueData=str(r.randint(0, 5)),
              InitiatingProcessFileName=exe, InitiatingProcessAccountName=u.name)
        g.add("DeviceEvents", t, DeviceId=h.device_id, DeviceName=h.name,
              ActionType="SmartScreenUrlWarning", AccountName=u.name,
              AdditionalFields=json.dumps({"Experience": "Malicious"}))
        g.add("DeviceImageLoadEvents", t, DeviceId=h.device_id, DeviceName=h.name,
              FileName="kernel32.dll", FolderPath="C:\\Windows\\System32\\kernel32.dll",
              SHA256=g.hex(64), InitiatingProcessFileName=exe)
        peer = r.choice(users)
        msg_id = g.guid()
        g.add("EmailEvents", t, NetworkMessageId=msg_id, InternetMessageId=f"<{g.hex(12)}@m>",
              SenderFromAddress=peer.upn, SenderMailFromAddress=peer.upn,
              SenderIPv4=f"192.0.2.{r.randint(1, 254)}", RecipientEmailAddress=u.upn,
              Subject=f"{r.choice(_WORDS).title()} sync", DeliveryAction="Delivered",
              DeliveryLocation="Inbox", ThreatTypes="", AttachmentCount=r.randint(0, 1),
              UrlCount=1)
        g.add("EmailUrlInfo", t, NetworkMessageId=msg_id, Url=f"https://{site}/",
              UrlDomain=site, UrlLocation="Body")
        g.add("EmailAttachmentInfo", t, NetworkMessageId=msg_id,
              SenderFromAddress=peer.upn, RecipientEmailAddress=u.upn, FileName=doc,
              FileType=doc.rsplit(".", 1)[1], SHA256=g.hex(64), FileSize=r.randint(1000, 10 ** 6),
              ThreatTypes="")
        g.add("UrlClickEvents", t, Url=f"https://{site}/", ActionType="ClickAllowed",
              AccountUpn=u.upn, NetworkMessageId=msg_id,
              IPAddress=f"203.0.113.{r.randint(1, 30)}", IsClickedThrough=1, Workload="Email")
        g.add("OfficeActivity", t, Operation=r.choice(("FileAccessed", "MailItemsAccessed")),
              UserId=u.upn, ClientIP=f"203.0.113.{r.randint(1, 30)}",
              OfficeWorkload=r.choice(("SharePoint", "Exchange")), ResultStatus="Succeeded",
              MailboxOwnerUPN=u.upn)
        g.add("CloudAppEvents", t, ActionType="FileAccessed",
              Application="Microsoft SharePoint Online", ApplicationId=20892,
              AccountDisplayName=u.display, AccountObjectId=u.aad_id,
              IPAddress=f"203.0.113.{r.randint(1, 30)}", CountryCode="US", ObjectName=doc)
        g.add("IdentityLogonEvents", t, ActionType="LogonSuccess", LogonType="Interactive",
              Protocol="Kerberos", AccountName=u.name, AccountDomain=g.domain,
              AccountUpn=u.upn, AccountSid=u.sid, DeviceName=h.name, IPAddress=h.ip)
        g.add("CommonSecurityLog", t, DeviceVendor="Palo Alto Networks", DeviceProduct="PAN-OS",
              Activity="TRAFFIC", SourceIP=h.ip, DestinationIP=f"198.51.100.{r.randint(1, 254)}",
              DestinationPort=443, RequestURL=site, DeviceAction="allow")
        if r.random() < 0.2:
            g.add("AuditLogs", t, OperationName="Update user", Category="UserManagement",
                  Result="success", InitiatedBy=json.dumps({"app": "Microsoft Graph"}),
                  TargetResources=json.dumps([{"userPrincipalName": u.upn}]),
                  CorrelationId=g.guid())
            g.add("IdentityDirectoryEvents", t, ActionType="Group Membership changed",
                  AccountName=u.name, AccountUpn=u.upn, DeviceName=h.name, IPAddress=h.ip,
                  AdditionalFields=json.dumps({"TO.GROUP": "Staff"}))


def generate_tenant(seed: int, *, incidents: int = 8, users: int = 40, hosts: int = 24,
                    noise_rows: int = 60, kinds: tuple[str, ...] = ("phish", "identity"),
                    days: int = 30) -> Tenant:
    """Generate a tenant (organisation, benign noise, ``incidents`` attacks) from ``seed``.

    Args:
      seed: the tenant's seed (``random.Random(seed)``; same seed, same tables).
      incidents: number of attacks (>= 1); kill chains alternate through ``kinds`` (the first
        of each kind first, then a seeded choice).
      users, hosts: size of the organisation (users >= 8, hosts >= 4).
      noise_rows: benign rounds; each writes one row into most log tables.
      kinds: chain kinds among ``"phish"`` and ``"identity"``.
      days: span of the log window; incidents are spread over it.

    Returns:
      A :class:`Tenant` with every table of :data:`SCHEMA` (rows sorted by time).
    """
    for name, value, lo in (("incidents", incidents, 1), ("users", users, 8),
                            ("hosts", hosts, 4), ("noise_rows", noise_rows, 0),
                            ("days", days, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < lo:
            raise ValueError(f"{name} must be an int >= {lo}, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    bad = [k for k in kinds if k not in _CHAINS]
    if not kinds or bad:
        raise ValueError(f"kinds must be a non-empty subset of {sorted(_CHAINS)}, got {kinds!r}")
    r0 = random.Random(seed)
    domain = f"{r0.choice(_WORDS)}{r0.choice(_WORDS)}{seed % 1000}.onmicrosoft.com"
    g = _Gen(seed, domain, _dt.datetime(2026, 8, 1, tzinfo=_dt.timezone.utc))
    user_list, host_list = _make_org(g, users, hosts)
    span = days * 24 * 60.0
    _noise(g, user_list, host_list, noise_rows, span)
    for h in host_list:
        g.add("DeviceInfo", 0.0, DeviceId=h.device_id, DeviceName=h.name, OSPlatform=h.os,
              OSVersion="10.0", PublicIP=f"203.0.113.{g.r.randint(31, 60)}", AadDeviceId=h.aad_id,
              MachineGroup="Default", LoggedOnUsers="[]")
        g.add("DeviceNetworkInfo", 0.0, DeviceId=h.device_id, DeviceName=h.name,
              IPAddresses=json.dumps([{"IPAddress": h.ip}]), MacAddress=g.hex(12),
              ConnectedNetworks=json.dumps([{"Name": "corp"}]))
    for u in user_list:
        g.add("IdentityInfo", 0.0, AccountName=u.name, AccountUPN=u.upn,
              AccountObjectId=u.aad_id, AccountSID=u.sid, AccountDisplayName=u.display,
              Department=u.dept, JobTitle="Staff", MailAddress=u.upn)
    al = _Alerts(g)
    out = []
    for i in range(incidents):
        kind = kinds[i] if i < len(kinds) else g.r.choice(kinds)
        t = (i + 0.5) * span / (incidents + 1) + g.r.uniform(0, 60)
        title, ids = _CHAINS[kind](g, al, user_list, host_list, t)
        number = 1000 + i + 1
        out.append(Incident(number, kind, title, tuple(ids)))
        g.add("SecurityIncident", t + 200, IncidentNumber=number,
              IncidentName=g.guid(), Title=title, Description=f"{kind} incident",
              Severity="High", Status="New", AlertIds=json.dumps(list(ids)),
              CreatedTime=g.time(t + 200), ProviderName="Azure Sentinel")
    tables = {}
    for name, rows in g.tables.items():
        key = "TimeGenerated" if "TimeGenerated" in SCHEMA[name] else "Timestamp"
        tables[name] = sorted(rows, key=lambda row: row[key])  # stable: ties keep insert order
    return Tenant(seed=seed, domain=domain, tables=tables, incidents=tuple(out))
