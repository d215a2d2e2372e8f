// ns-3 reference model for groupwire's `tcp-dumbbell` scenario.
//
// Topology (N senders, N receivers, two routers):
//
//   sender_i --10G,0.1ms-- r0 ==B, RTT/2-0.2ms== r1 --10G,0.1ms-- receiver_i
//
// Two-way propagation delay is exactly --rtt (0.1 + d + 0.1 each way).
// The only place packets queue (and drop) is a drop-tail FifoQueueDisc of
// min(BDP, 2048) packets at r0's egress toward r1. The bottleneck NetDevice's
// own TxQueue is 1 packet, so the qdisc is the only real queue.
//
// N long-lived TCP NewReno flows (BulkSendApplication, unlimited) start at
// times drawn uniformly from [0, 1 s) with ns-3's RNG seeded from --seed.
// Optionally (--cbrFlows=M) M constant-bit-rate UDP flows (UdpClient, one
// 1500-byte IP packet every --cbrRate interval) share the bottleneck, each
// from its own sender, starting at times drawn from the same stream after
// the TCP flows' (as groupwire's tcp-dumbbell draws them). Goodput, loss and
// fairness (TCP flows), and each CBR flow's loss rate and loss runs at the
// bottleneck, are measured in [warmup, duration).
//
// The last line of stdout is one JSON object (see README.md); the lines
// before it, prefixed with '#', document the effective configuration.
//
// Built by validation/ns3/build.sh against Debian's libns3-dev (ns-3 3.37).

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/nix-vector-routing-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

namespace
{

// Bottleneck qdisc counters (forward direction r0 -> r1), measurement window only.
uint64_t g_bnEnqueued = 0;
uint64_t g_bnDropped = 0;
// Whole-run counters, for sanity checks.
uint64_t g_bnDroppedTotal = 0;
uint64_t g_otherDrops = 0; // any drop anywhere else (must stay 0)
double g_warmupS = 0.0;

// Per-CBR-flow bottleneck counters (measurement window). A packet's flow is
// its sender: sender i has address 10.<i/256>.<i%256>.1, and senders
// g_tcpFlows.. are the CBR ones.
uint32_t g_tcpFlows = 0;
struct CbrCounters
{
    uint64_t arrivals = 0; // enqueued + dropped
    uint64_t drops = 0;
    uint64_t runs = 0;     // maximal runs of consecutive drops of this flow
    bool lastDropped = false;
};
std::vector<CbrCounters> g_cbr;

// The CBR flow a bottleneck item belongs to, or -1.
int
CbrIndex(Ptr<const QueueDiscItem> item)
{
    if (g_cbr.empty())
    {
        return -1;
    }
    Ptr<const Ipv4QueueDiscItem> ip = DynamicCast<const Ipv4QueueDiscItem>(item);
    if (!ip)
    {
        return -1;
    }
    uint8_t b[4];
    ip->GetHeader().GetSource().Serialize(b);
    const uint32_t sender = static_cast<uint32_t>(b[1]) * 256 + b[2];
    if (b[0] != 10 || sender < g_tcpFlows || sender - g_tcpFlows >= g_cbr.size())
    {
        return -1;
    }
    return static_cast<int>(sender - g_tcpFlows);
}

void
CbrArrival(Ptr<const QueueDiscItem> item, bool dropped)
{
    const int j = CbrIndex(item);
    if (j < 0)
    {
        return;
    }
    CbrCounters& c = g_cbr[j];
    ++c.arrivals;
    if (dropped)
    {
        ++c.drops;
        if (!c.lastDropped)
        {
            ++c.runs;
        }
    }
    c.lastDropped = dropped;
}

bool
InWindow()
{
    return Simulator::Now().GetSeconds() >= g_warmupS;
}

void
BnEnqueue(Ptr<const QueueDiscItem> item)
{
    if (InWindow())
    {
        ++g_bnEnqueued;
        CbrArrival(item, false);
    }
}

void
BnDrop(Ptr<const QueueDiscItem> item)
{
    ++g_bnDroppedTotal;
    if (InWindow())
    {
        ++g_bnDropped;
        CbrArrival(item, true);
    }
}

void
OtherQdiscDrop(Ptr<const QueueDiscItem>)
{
    ++g_otherDrops;
}

void
OtherDeviceDrop(Ptr<const Packet>)
{
    ++g_otherDrops;
}

// Default (i.e. effective, after Config::SetDefault) value of an attribute.
std::string
AttrDefault(const std::string& typeName, const std::string& attr)
{
    TypeId tid = TypeId::LookupByName(typeName);
    TypeId::AttributeInformation info;
    if (!tid.LookupAttributeByName(attr, &info))
    {
        return "<unknown>";
    }
    return info.initialValue->SerializeToString(info.checker);
}

void
WatchDrops(Ptr<NetDevice> dev, Ptr<QueueDisc> qd)
{
    // Device-level TxQueue drops and qdisc drops are both "should never happen"
    // except at the bottleneck qdisc, which is traced separately.
    Ptr<PointToPointNetDevice> p2p = DynamicCast<PointToPointNetDevice>(dev);
    p2p->GetQueue()->TraceConnectWithoutContext("Drop", MakeCallback(&OtherDeviceDrop));
    p2p->TraceConnectWithoutContext("MacTxDrop", MakeCallback(&OtherDeviceDrop));
    p2p->TraceConnectWithoutContext("PhyRxDrop", MakeCallback(&OtherDeviceDrop));
    if (qd)
    {
        qd->TraceConnectWithoutContext("Drop", MakeCallback(&OtherQdiscDrop));
    }
}

// ---- Optional per-flow loss-recovery counters (--tcpStats) ----
// Whole run (including warm-up), like groupwire's flows.csv.
struct FlowStats
{
    uint64_t retransmits = 0; // data segments sent below the highest sequence sent
    uint64_t timeouts = 0;    // entries into CA_LOSS (retransmission timeouts)
    uint64_t recoveries = 0;  // entries into CA_RECOVERY (fast retransmits)
    uint32_t highTx = 0;      // highest sequence number sent + 1 (relative to ISN)
    bool seen = false;
    uint32_t isn = 0;
};
std::vector<FlowStats> g_flowStats;

void
FlowTx(uint32_t i, Ptr<const Packet> p, const TcpHeader& h, Ptr<const TcpSocketBase>)
{
    if (p->GetSize() == 0)
    {
        return;
    }
    FlowStats& f = g_flowStats[i];
    const uint32_t seq = h.GetSequenceNumber().GetValue();
    if (!f.seen)
    {
        f.seen = true;
        f.isn = seq;
    }
    const uint32_t rel = seq - f.isn;
    const uint32_t end = rel + p->GetSize();
    if (rel < f.highTx)
    {
        ++f.retransmits;
    }
    f.highTx = std::max(f.highTx, end);
}

void
FlowCongState(uint32_t i, TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t now)
{
    if (now == TcpSocketState::CA_LOSS)
    {
        ++g_flowStats[i].timeouts;
    }
    else if (now == TcpSocketState::CA_RECOVERY)
    {
        ++g_flowStats[i].recoveries;
    }
}

void
HookFlow(uint32_t i, Ptr<BulkSendApplication> app)
{
    Ptr<TcpSocketBase> s = DynamicCast<TcpSocketBase>(app->GetSocket());
    NS_ABORT_MSG_IF(!s, "BulkSendApplication has no TCP socket yet");
    s->TraceConnectWithoutContext("Tx", MakeBoundCallback(&FlowTx, i));
    s->TraceConnectWithoutContext("CongState", MakeBoundCallback(&FlowCongState, i));
}

std::string
Num(double v)
{
    std::ostringstream os;
    os << std::setprecision(12) << v;
    return os.str();
}

} // namespace

int
main(int argc, char* argv[])
{
    std::string rateStr = "100Mbps";
    double rttMs = 10.0;
    uint32_t flows = 10;
    double durationS = 20.0;
    double warmupS = 5.0;
    uint32_t seed = 1;
    std::string accessRateStr = "10Gbps";
    double accessDelayMs = 0.1;
    uint32_t maxQueue = 2048;
    bool pppCompensate = true;
    uint64_t bufOverride = 0;
    std::string routing = "nix";
    bool tcpStats = false;
    uint32_t cbrFlows = 0;
    std::string cbrRateStr = "30Mbps";

    CommandLine cmd(__FILE__);
    cmd.AddValue("rate", "Bottleneck rate (IP-level), e.g. 100Mbps, 1Gbps", rateStr);
    cmd.AddValue("rtt", "Two-way propagation delay in ms", rttMs);
    cmd.AddValue("flows", "Number of long-lived TCP flows (= senders = receivers)", flows);
    cmd.AddValue("duration", "Simulated seconds", durationS);
    cmd.AddValue("warmup", "Seconds excluded from measurement", warmupS);
    cmd.AddValue("seed", "RNG seed (flow start times)", seed);
    cmd.AddValue("accessRate", "Access link rate", accessRateStr);
    cmd.AddValue("accessDelay", "Access link one-way delay in ms", accessDelayMs);
    cmd.AddValue("maxQueue", "Cap on bottleneck queue (packets)", maxQueue);
    cmd.AddValue("pppCompensate",
                 "Scale link rates by 1502/1500 so the 2-byte PPP header does not eat "
                 "into the IP-level rate",
                 pppCompensate);
    cmd.AddValue("sockBuf",
                 "TCP SndBufSize/RcvBufSize in bytes (0: 4*(BDP+queue)*1500 + 1 MiB)",
                 bufOverride);
    cmd.AddValue("routing",
                 "IPv4 routing: nix (nix-vector, O(1) per hop after the first packet) or "
                 "global (Ipv4GlobalRouting, linear route lookup: slower with many flows)",
                 routing);
    cmd.AddValue("tcpStats",
                 "Count retransmitted segments, timeouts and fast recoveries per flow "
                 "(adds retransmits, timeouts, fast_retransmits and per-flow arrays to the JSON)",
                 tcpStats);
    cmd.AddValue("cbrFlows",
                 "Constant-bit-rate UDP flows sharing the bottleneck (each from its own "
                 "sender; adds per-flow UDP loss to the JSON)",
                 cbrFlows);
    cmd.AddValue("cbrRate",
                 "Payload rate of each CBR flow (1472-byte UDP payloads, 1500-byte IP packets)",
                 cbrRateStr);
    cmd.Parse(argc, argv);

    NS_ABORT_MSG_IF(flows == 0, "--flows must be >= 1");
    NS_ABORT_MSG_IF(flows + cbrFlows > 256 * 100, "at most 25600 senders");
    NS_ABORT_MSG_IF(routing != "nix" && routing != "global", "--routing must be nix or global");
    NS_ABORT_MSG_IF(warmupS >= durationS, "--warmup must be < --duration");
    const double bnDelayMs = rttMs / 2.0 - 2.0 * accessDelayMs;
    NS_ABORT_MSG_IF(bnDelayMs < 0.0, "--rtt too small for the access delays");
    g_warmupS = warmupS;
    g_tcpFlows = flows;
    g_cbr.assign(cbrFlows, CbrCounters{});
    const uint32_t pairs = flows + cbrFlows;

    const uint64_t rateBps = DataRate(rateStr).GetBitRate();
    const uint64_t accessBps = DataRate(accessRateStr).GetBitRate();
    const uint32_t ipPacket = 1500;
    const uint32_t mss = 1460; // 1500 - 20 (IPv4) - 20 (TCP, no options)
    const uint64_t bdpPackets =
        static_cast<uint64_t>(static_cast<double>(rateBps) * rttMs / 1000.0 / (ipPacket * 8));
    const uint32_t queuePackets =
        static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(bdpPackets, maxQueue)));
    // Line rates: PointToPointNetDevice serialises a 2-byte PPP header too.
    const double ppp = pppCompensate ? (ipPacket + 2.0) / ipPacket : 1.0;
    const DataRate bnLineRate(static_cast<uint64_t>(static_cast<double>(rateBps) * ppp));
    const DataRate accessLineRate(static_cast<uint64_t>(static_cast<double>(accessBps) * ppp));

    // Socket buffers: never the limiting factor. cwnd of one flow is at most
    // about BDP + queue; slow-start overshoot can double that.
    const uint64_t bufBytes =
        bufOverride ? bufOverride
                    : std::min<uint64_t>(4ull * (bdpPackets + queuePackets) * ipPacket + (1u << 20),
                                         1ull << 30);

    // ---- RNG ----
    RngSeedManager::SetSeed(seed);
    RngSeedManager::SetRun(1);

    // ---- TCP configuration (ns-3 defaults overridden where noted) ----
    // ns-3 default is TcpCubic.
    Config::SetDefault("ns3::TcpL4Protocol::SocketType",
                       TypeIdValue(TypeId::LookupByName("ns3::TcpNewReno")));
    // ns-3 default is TcpPrrRecovery (proportional rate reduction).
    Config::SetDefault("ns3::TcpL4Protocol::RecoveryType",
                       TypeIdValue(TypeId::LookupByName("ns3::TcpClassicRecovery")));
    // ns-3 default is 536.
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(mss));
    // ns-3 default is on; off so data packets are exactly 1500 bytes (no options).
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(false));
    // These are the ns-3 defaults, set explicitly so they are documented.
    Config::SetDefault("ns3::TcpSocketBase::WindowScaling", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(200)));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(bufBytes));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(bufBytes));
    // DelAckCount (2) and DelAckTimeout (200 ms) are left at ns-3 defaults.

    // ---- Nodes ----
    NodeContainer routers;
    routers.Create(2);
    NodeContainer senders;
    senders.Create(pairs);
    NodeContainer receivers;
    receivers.Create(pairs);

    InternetStackHelper stack;
    Ipv4NixVectorHelper nix;
    if (routing == "nix")
    {
        stack.SetRoutingHelper(nix);
    }
    stack.Install(routers);
    stack.Install(senders);
    stack.Install(receivers);

    // Access links: 10 Gbit/s, 0.1 ms, effectively unbounded queues.
    PointToPointHelper access;
    access.SetDeviceAttribute("DataRate", DataRateValue(accessLineRate));
    access.SetChannelAttribute("Delay", TimeValue(MicroSeconds(accessDelayMs * 1000.0)));
    access.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("1000p"));
    TrafficControlHelper accessTc;
    accessTc.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", StringValue("1000000p"));

    // Bottleneck: rate B, delay RTT/2 - 0.2 ms, 1-packet device queue under a
    // drop-tail FifoQueueDisc of queuePackets packets.
    PointToPointHelper bottleneck;
    bottleneck.SetDeviceAttribute("DataRate", DataRateValue(bnLineRate));
    bottleneck.SetChannelAttribute("Delay", TimeValue(MicroSeconds(bnDelayMs * 1000.0)));
    bottleneck.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("1p"));
    TrafficControlHelper bnTc;
    bnTc.SetRootQueueDisc("ns3::FifoQueueDisc",
                          "MaxSize",
                          QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, queuePackets)));

    Ipv4AddressHelper addr;

    NetDeviceContainer bnDevs = bottleneck.Install(routers.Get(0), routers.Get(1));
    QueueDiscContainer bnQdiscs = bnTc.Install(bnDevs);
    addr.SetBase("10.255.0.0", "255.255.255.252");
    addr.Assign(bnDevs);
    // Forward direction (data): r0's device.
    bnQdiscs.Get(0)->TraceConnectWithoutContext("Enqueue", MakeCallback(&BnEnqueue));
    bnQdiscs.Get(0)->TraceConnectWithoutContext("Drop", MakeCallback(&BnDrop));
    // Reverse direction (ACKs) should never drop.
    WatchDrops(bnDevs.Get(1), bnQdiscs.Get(1));
    {
        Ptr<PointToPointNetDevice> d = DynamicCast<PointToPointNetDevice>(bnDevs.Get(0));
        d->TraceConnectWithoutContext("MacTxDrop", MakeCallback(&OtherDeviceDrop));
        d->TraceConnectWithoutContext("PhyRxDrop", MakeCallback(&OtherDeviceDrop));
        d->GetQueue()->TraceConnectWithoutContext("Drop", MakeCallback(&OtherDeviceDrop));
    }

    std::vector<Ipv4Address> receiverAddrs;
    for (uint32_t i = 0; i < pairs; ++i)
    {
        NetDeviceContainer left = access.Install(senders.Get(i), routers.Get(0));
        QueueDiscContainer leftQd = accessTc.Install(left);
        NetDeviceContainer right = access.Install(routers.Get(1), receivers.Get(i));
        QueueDiscContainer rightQd = accessTc.Install(right);
        // 10.<i/256>.<i%256>.0/30 style addressing: one /24 per link side.
        std::ostringstream l;
        l << "10." << (i / 256) << "." << (i % 256) << ".0";
        addr.SetBase(l.str().c_str(), "255.255.255.252");
        addr.Assign(left);
        std::ostringstream r;
        r << "10." << (100 + i / 256) << "." << (i % 256) << ".0";
        addr.SetBase(r.str().c_str(), "255.255.255.252");
        Ipv4InterfaceContainer ri = addr.Assign(right);
        receiverAddrs.push_back(ri.GetAddress(1));
        for (uint32_t k = 0; k < 2; ++k)
        {
            WatchDrops(left.Get(k), leftQd.Get(k));
            WatchDrops(right.Get(k), rightQd.Get(k));
        }
    }
    if (routing == "global")
    {
        Ipv4GlobalRoutingHelper::PopulateRoutingTables();
    }

    // ---- Applications ----
    const uint16_t port = 5000;
    Ptr<UniformRandomVariable> startRv = CreateObject<UniformRandomVariable>();
    startRv->SetAttribute("Min", DoubleValue(0.0));
    startRv->SetAttribute("Max", DoubleValue(1.0));

    g_flowStats.assign(flows, FlowStats{});
    std::vector<Ptr<PacketSink>> sinks;
    std::vector<double> startTimes;
    for (uint32_t i = 0; i < flows; ++i)
    {
        PacketSinkHelper sinkHelper("ns3::TcpSocketFactory",
                                    InetSocketAddress(Ipv4Address::GetAny(), port));
        ApplicationContainer sa = sinkHelper.Install(receivers.Get(i));
        sa.Start(Seconds(0.0));
        sinks.push_back(DynamicCast<PacketSink>(sa.Get(0)));

        BulkSendHelper bulk("ns3::TcpSocketFactory", InetSocketAddress(receiverAddrs[i], port));
        bulk.SetAttribute("MaxBytes", UintegerValue(0)); // unlimited
        bulk.SetAttribute("SendSize", UintegerValue(mss));
        ApplicationContainer ba = bulk.Install(senders.Get(i));
        const double t = startRv->GetValue();
        startTimes.push_back(t);
        ba.Start(Seconds(t));
        if (tcpStats)
        {
            // The socket exists once StartApplication has run.
            Simulator::Schedule(Seconds(t) + NanoSeconds(1),
                                &HookFlow,
                                i,
                                DynamicCast<BulkSendApplication>(ba.Get(0)));
        }
    }

    // CBR flows: UdpClient sends one packet per interval, exactly periodic
    // (its SeqTsHeader is part of the 1472-byte payload). The interval is
    // rounded up to whole nanoseconds, as groupwire's Bitrate::transmit_time.
    const uint32_t cbrPayload = ipPacket - 28;
    const uint64_t cbrRateBps = DataRate(cbrRateStr).GetBitRate();
    NS_ABORT_MSG_IF(cbrFlows > 0 && cbrRateBps == 0, "--cbrRate must be positive");
    const uint64_t cbrIntervalNs =
        cbrRateBps ? (static_cast<uint64_t>(cbrPayload) * 8 * 1000000000ull + cbrRateBps - 1) /
                         cbrRateBps
                   : 0;
    std::vector<double> cbrStarts;
    for (uint32_t j = 0; j < cbrFlows; ++j)
    {
        const uint32_t i = flows + j;
        const uint16_t cbrPort = 6000;
        PacketSinkHelper sinkHelper("ns3::UdpSocketFactory",
                                    InetSocketAddress(Ipv4Address::GetAny(), cbrPort));
        sinkHelper.Install(receivers.Get(i)).Start(Seconds(0.0));
        UdpClientHelper client(receiverAddrs[i], cbrPort);
        client.SetAttribute("MaxPackets", UintegerValue(0xffffffffu));
        client.SetAttribute("Interval", TimeValue(NanoSeconds(cbrIntervalNs)));
        client.SetAttribute("PacketSize", UintegerValue(cbrPayload));
        ApplicationContainer ca = client.Install(senders.Get(i));
        const double t = startRv->GetValue();
        cbrStarts.push_back(t);
        ca.Start(Seconds(t));
    }

    // ---- Measurement ----
    std::vector<uint64_t> rxAtWarmup(flows, 0);
    std::vector<uint64_t> rxAtEnd(flows, 0);
    Simulator::Schedule(Seconds(warmupS), [&]() {
        for (uint32_t i = 0; i < flows; ++i)
        {
            rxAtWarmup[i] = sinks[i]->GetTotalRx();
        }
    });
    Simulator::Stop(Seconds(durationS));

    // ---- Print effective configuration ----
    std::cout << "# ns-3 " << "3.37 (Debian libns3-dev)" << "\n";
    std::cout << "# rate=" << rateStr << " (" << rateBps << " bps IP-level, line "
              << bnLineRate.GetBitRate() << " bps incl. PPP)"
              << " rtt=" << rttMs << "ms flows=" << flows << " duration=" << durationS
              << "s warmup=" << warmupS << "s seed=" << seed << "\n";
    std::cout << "# access: " << accessRateStr << ", " << accessDelayMs
              << " ms; bottleneck one-way delay " << bnDelayMs << " ms\n";
    std::cout << "# routing=" << routing << " scheduler=" << [] {
        StringValue v;
        GlobalValue::GetValueByName("SchedulerType", v);
        return v.Get();
    }() << "\n";
    std::cout << "# bdp_packets=" << bdpPackets << " queue_packets=" << queuePackets
              << " (FifoQueueDisc, device TxQueue 1p)\n";
    if (cbrFlows > 0)
    {
        std::cout << "# cbr: " << cbrFlows << " UdpClient flows at " << cbrRateStr << " ("
                  << cbrPayload << "-byte payloads, interval " << cbrIntervalNs << " ns)\n";
    }
    for (const auto& a : std::vector<std::pair<std::string, std::string>>{
             {"ns3::TcpL4Protocol", "SocketType"},
             {"ns3::TcpL4Protocol", "RecoveryType"},
             {"ns3::TcpSocket", "SegmentSize"},
             {"ns3::TcpSocket", "InitialCwnd"},
             {"ns3::TcpSocket", "InitialSlowStartThreshold"},
             {"ns3::TcpSocket", "DelAckCount"},
             {"ns3::TcpSocket", "DelAckTimeout"},
             {"ns3::TcpSocket", "SndBufSize"},
             {"ns3::TcpSocket", "RcvBufSize"},
             {"ns3::TcpSocket", "ConnTimeout"},
             {"ns3::TcpSocketBase", "Timestamp"},
             {"ns3::TcpSocketBase", "WindowScaling"},
             {"ns3::TcpSocketBase", "Sack"},
             {"ns3::TcpSocketBase", "MinRto"},
             {"ns3::TcpSocketBase", "ClockGranularity"},
             {"ns3::TcpSocketBase", "LimitedTransmit"},
             {"ns3::TcpSocketBase", "ReTxThreshold"},
             {"ns3::TcpSocketState", "EnablePacing"},
             {"ns3::TcpSocketBase", "UseEcn"},
         })
    {
        std::cout << "# " << a.first << "::" << a.second << " = "
                  << AttrDefault(a.first, a.second) << "\n";
    }
    {
        std::ostringstream st;
        for (uint32_t i = 0; i < flows && i < 10; ++i)
        {
            st << (i ? " " : "") << std::setprecision(4) << startTimes[i];
        }
        std::cout << "# flow start times (first 10): " << st.str()
                  << (flows > 10 ? " ..." : "") << "\n";
    }
    std::cout << std::flush;

    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    Simulator::Run();
    const std::clock_t c1 = std::clock();
    const auto t1 = std::chrono::steady_clock::now();
    const double wallS = std::chrono::duration<double>(t1 - t0).count();
    // CPU time of this process during Run(): robust against a busy machine.
    const double cpuS = static_cast<double>(c1 - c0) / CLOCKS_PER_SEC;
    const uint64_t events = Simulator::GetEventCount();

    for (uint32_t i = 0; i < flows; ++i)
    {
        rxAtEnd[i] = sinks[i]->GetTotalRx();
    }
    Simulator::Destroy();

    // ---- Results ----
    const double window = durationS - warmupS;
    std::vector<double> perFlow(flows);
    double sum = 0.0, sumSq = 0.0;
    for (uint32_t i = 0; i < flows; ++i)
    {
        perFlow[i] = static_cast<double>(rxAtEnd[i] - rxAtWarmup[i]) * 8.0 / window;
        sum += perFlow[i];
        sumSq += perFlow[i] * perFlow[i];
    }
    const double jain = sumSq > 0.0 ? (sum * sum) / (flows * sumSq) : 0.0;
    const uint64_t bnPackets = g_bnEnqueued + g_bnDropped;
    const double loss = bnPackets > 0 ? static_cast<double>(g_bnDropped) / bnPackets : 0.0;

    std::cout << "# goodput " << sum / 1e6 << " Mbit/s (" << 100.0 * sum / rateBps
              << "% of bottleneck), loss " << loss << ", jain " << jain << ", drops total "
              << g_bnDroppedTotal << ", non-bottleneck drops " << g_otherDrops << ", events "
              << events << ", wall " << wallS << " s, cpu " << cpuS << " s\n";
    if (g_otherDrops != 0)
    {
        std::cerr << "WARNING: " << g_otherDrops << " drops outside the bottleneck qdisc\n";
    }

    std::ostringstream js;
    js << "{\"simulator\":\"ns-3\"" << ",\"rate_bps\":" << rateBps << ",\"rtt_ms\":" << Num(rttMs)
       << ",\"flows\":" << flows << ",\"duration_s\":" << Num(durationS)
       << ",\"warmup_s\":" << Num(warmupS) << ",\"seed\":" << seed
       << ",\"queue_packets\":" << queuePackets << ",\"throughput_bps\":" << Num(sum)
       << ",\"per_flow_bps\":[";
    for (uint32_t i = 0; i < flows; ++i)
    {
        js << (i ? "," : "") << Num(perFlow[i]);
    }
    js << "],\"jain_fairness\":" << Num(jain) << ",\"bottleneck_loss_rate\":" << Num(loss)
       << ",\"bottleneck_packets\":" << bnPackets << ",\"drops\":" << g_bnDropped
       << ",\"other_drops\":" << g_otherDrops << ",\"events\":" << events
       << ",\"wall_seconds\":" << Num(wallS) << ",\"cpu_seconds\":" << Num(cpuS);
    if (tcpStats)
    {
        uint64_t rtx = 0, to = 0, fr = 0;
        std::ostringstream pfTo, pfRtx;
        for (uint32_t i = 0; i < flows; ++i)
        {
            rtx += g_flowStats[i].retransmits;
            to += g_flowStats[i].timeouts;
            fr += g_flowStats[i].recoveries;
            pfTo << (i ? "," : "") << g_flowStats[i].timeouts;
            pfRtx << (i ? "," : "") << g_flowStats[i].retransmits;
        }
        js << ",\"retransmits\":" << rtx << ",\"timeouts\":" << to
           << ",\"fast_retransmits\":" << fr << ",\"per_flow_timeouts\":[" << pfTo.str()
           << "],\"per_flow_retransmits\":[" << pfRtx.str() << "]";
    }
    if (cbrFlows > 0)
    {
        uint64_t arr = 0, drops = 0, runs = 0;
        double lo = 1.0, hi = 0.0;
        std::ostringstream pf;
        for (uint32_t j = 0; j < cbrFlows; ++j)
        {
            const CbrCounters& c = g_cbr[j];
            arr += c.arrivals;
            drops += c.drops;
            runs += c.runs;
            const double r = c.arrivals ? static_cast<double>(c.drops) / c.arrivals : 0.0;
            lo = std::min(lo, r);
            hi = std::max(hi, r);
            pf << (j ? "," : "") << Num(r);
        }
        js << ",\"cbr_flows\":" << cbrFlows << ",\"cbr_rate_bps\":" << cbrRateBps
           << ",\"cbr_packets\":" << arr << ",\"cbr_lost\":" << drops
           << ",\"cbr_loss_rate\":" << Num(arr ? static_cast<double>(drops) / arr : 0.0)
           << ",\"cbr_loss_rate_min\":" << Num(lo) << ",\"cbr_loss_rate_max\":" << Num(hi)
           << ",\"cbr_mean_loss_run\":" << Num(runs ? static_cast<double>(drops) / runs : 0.0)
           << ",\"per_flow_cbr_loss\":[" << pf.str() << "]";
    }
    js << "}";
    std::cout << js.str() << std::endl;
    return 0;
}
