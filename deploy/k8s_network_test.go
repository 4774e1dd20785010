package deploy

// The checks of k8s/networkpolicy.yaml: what each pod may reach, judged
// from the policies that select it (k8s_test.go builds the objects).

import (
	"net"
	"net/url"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// egressAllowed reports whether the policies selecting a pod with podLabels
// let it reach a peer on proto/port; peerOK judges each peer of a rule (a
// rule with no peers reaches everything, which peerOK(nil) judges).
func egressAllowed(p *problems, pols []*networkingv1.NetworkPolicy, podLabels map[string]string, proto corev1.Protocol, port int, peerOK func(*networkingv1.NetworkPolicyPeer) bool) bool {
	for _, pol := range pols {
		if !slices.Contains(pol.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || !selectsPod(p, pol, podLabels) {
			continue
		}
		for _, r := range pol.Spec.Egress {
			if !portAllowed(r.Ports, proto, port) {
				continue
			}
			if len(r.To) == 0 && peerOK(nil) {
				return true
			}
			for i := range r.To {
				if peerOK(&r.To[i]) {
					return true
				}
			}
		}
	}
	return false
}

func selectsPod(p *problems, pol *networkingv1.NetworkPolicy, podLabels map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(&pol.Spec.PodSelector)
	if err != nil {
		p.add("NetworkPolicy %s: %v", pol.Name, err)
		return false
	}
	return s.Matches(labels.Set(podLabels))
}

func portAllowed(ports []networkingv1.NetworkPolicyPort, proto corev1.Protocol, port int) bool {
	if len(ports) == 0 {
		return true
	}
	for _, pp := range ports {
		pr := corev1.ProtocolTCP
		if pp.Protocol != nil {
			pr = *pp.Protocol
		}
		if pr != proto {
			continue
		}
		if pp.Port == nil {
			return true
		}
		lo, hi := pp.Port.IntValue(), pp.Port.IntValue()
		if pp.EndPort != nil {
			hi = int(*pp.EndPort)
		}
		if port >= lo && port <= hi {
			return true
		}
	}
	return false
}

// ipPeer accepts a peer that is an address block holding ip (nil: any block).
func ipPeer(ip net.IP) func(*networkingv1.NetworkPolicyPeer) bool {
	return func(peer *networkingv1.NetworkPolicyPeer) bool {
		if peer == nil {
			return ip != nil
		}
		if peer.IPBlock == nil {
			return false
		}
		if ip == nil {
			return true
		}
		if _, n, err := net.ParseCIDR(peer.IPBlock.CIDR); err != nil || !n.Contains(ip) {
			return false
		}
		for _, ex := range peer.IPBlock.Except {
			if _, n, err := net.ParseCIDR(ex); err == nil && n.Contains(ip) {
				return false
			}
		}
		return true
	}
}

// dnsPeer accepts the cluster DNS (kube-dns in kube-system).
func dnsPeer(peer *networkingv1.NetworkPolicyPeer) bool {
	return peer != nil && peer.NamespaceSelector != nil && peer.PodSelector != nil &&
		peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "kube-system" &&
		peer.PodSelector.MatchLabels["k8s-app"] == "kube-dns"
}

// podPeer accepts a peer selecting pods with podLabels in the namespace.
func podPeer(p *problems, podLabels map[string]string) func(*networkingv1.NetworkPolicyPeer) bool {
	return func(peer *networkingv1.NetworkPolicyPeer) bool {
		return peer != nil && peer.PodSelector != nil && peer.NamespaceSelector == nil && peer.IPBlock == nil &&
			matches(p, "NetworkPolicy peer", peer.PodSelector, podLabels)
	}
}

func checkK8sNetworkPolicies(p *problems, _ map[string][]byte, o *k8sObjects, f k8sFacts) {
	pols := o.policies
	if !slices.ContainsFunc(pols, func(pol *networkingv1.NetworkPolicy) bool {
		s := pol.Spec
		return len(s.PodSelector.MatchLabels) == 0 && len(s.PodSelector.MatchExpressions) == 0 &&
			slices.Contains(s.PolicyTypes, networkingv1.PolicyTypeIngress) && slices.Contains(s.PolicyTypes, networkingv1.PolicyTypeEgress) &&
			len(s.Ingress) == 0 && len(s.Egress) == 0
	}) {
		p.add("no default-deny NetworkPolicy (every pod, Ingress and Egress, no rule)")
	}
	public := net.ParseIP("203.0.113.10") // an address outside the private ranges
	metadata := net.ParseIP("169.254.169.254")
	for _, spec := range specs {
		d, job := o.deployments[spec.Name], o.jobs[spec.Name+"-migrate"]
		if d == nil || job == nil || len(d.Spec.Template.Spec.Containers) == 0 {
			continue
		}
		var q problems // configuration problems are the other checks'
		env, _ := podEnv(&q, spec.Name, o, d.Spec.Template.Spec, d.Spec.Template.Spec.Containers[0], f.keysDir)
		cfg, ok := loadServiceConfig(&q, spec.Name, spec, env)
		if !ok {
			p.add("%s: no configuration to check the network policies against", spec.Name)
			continue
		}
		pl := d.Spec.Template.Labels
		// Ingress to the HTTP port, from anywhere.
		open := false
		for _, pol := range pols {
			if !slices.Contains(pol.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || !selectsPod(p, pol, pl) {
				continue
			}
			for _, r := range pol.Spec.Ingress {
				open = open || (len(r.From) == 0 && portAllowed(r.Ports, corev1.ProtocolTCP, spec.DefaultPort))
			}
		}
		if !open {
			p.add("%s: no ingress to TCP %d", spec.Name, spec.DefaultPort)
		}
		_, dbPort := dbAddrOf(cfg.DatabaseURL)
		for _, pod := range []struct {
			what   string
			labels map[string]string
		}{{spec.Name, pl}, {job.Name, job.Spec.Template.Labels}} {
			for _, proto := range []corev1.Protocol{corev1.ProtocolUDP, corev1.ProtocolTCP} {
				if !egressAllowed(p, pols, pod.labels, proto, 53, dnsPeer) {
					p.add("%s: no egress to the cluster DNS on %s 53", pod.what, proto)
				}
			}
			if !egressAllowed(p, pols, pod.labels, corev1.ProtocolTCP, dbPort, ipPeer(nil)) {
				p.add("%s: no egress to its PostgreSQL on TCP %d", pod.what, dbPort)
			}
		}
		if egressAllowed(p, pols, job.Spec.Template.Labels, corev1.ProtocolTCP, 9092, ipPeer(nil)) {
			p.add("%s: egress to Kafka: migrate needs PostgreSQL only", job.Name)
		}
		for _, b := range cfg.Brokers {
			_, port, err := net.SplitHostPort(b)
			n, _ := strconv.Atoi(port)
			if err != nil || !egressAllowed(p, pols, pl, corev1.ProtocolTCP, n, ipPeer(nil)) {
				p.add("%s: no egress to Kafka on TCP %s (KAFKA_BROKERS %s)", spec.Name, port, b)
			}
		}
		// Webhooks: invoice reaches public addresses, never the metadata
		// service; nothing else reaches the internet.
		webhooks := egressAllowed(p, pols, pl, corev1.ProtocolTCP, 443, ipPeer(public))
		switch {
		case spec.Name == "invoice" && !webhooks:
			p.add("invoice: no egress to webhook endpoints (TCP 443 of a public address)")
		case spec.Name != "invoice" && webhooks:
			p.add("%s: egress to the internet, which it never calls", spec.Name)
		}
		for _, port := range []int{80, 443} {
			if egressAllowed(p, pols, pl, corev1.ProtocolTCP, port, ipPeer(metadata)) {
				p.add("%s: egress to 169.254.169.254:%d, the cloud metadata service", spec.Name, port)
			}
		}
		// Query calls the others' internal endpoints; no one else calls.
		for _, other := range specs {
			od := o.deployments[other.Name]
			if od == nil || other.Name == spec.Name {
				continue
			}
			allowed := egressAllowed(p, pols, pl, corev1.ProtocolTCP, other.DefaultPort, podPeer(p, od.Spec.Template.Labels))
			if spec.Name == "query" && !allowed {
				p.add("query: no egress to %s on TCP %d (SERVICE_URLS)", other.Name, other.DefaultPort)
			}
			if spec.Name != "query" && allowed {
				p.add("%s: egress to %s, which it never calls", spec.Name, other.Name)
			}
		}
	}
}

// dbAddrOf returns a database URL's host and port (5432 by default).
func dbAddrOf(rawURL string) (string, int) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", 0
	}
	if u.Port() == "" {
		return u.Hostname(), 5432
	}
	n, _ := strconv.Atoi(u.Port())
	return u.Hostname(), n
}
