package deploy

// The checks of the offline build (deploy/offline/images.sh, `make
// compose-images`) against compose.yaml: every image compose runs from a
// build section is built by the script with the Dockerfile compose names,
// each Dockerfile takes the one BASE argument, and the versions the
// registry build fetches are the ones the offline build uses.

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/usagebilling/billing/testkit/kafkabroker"
)

func TestOfflineImagesMatchCompose(t *testing.T) {
	p := loadCompose(t)
	script, err := os.ReadFile("offline/images.sh")
	if err != nil {
		t.Fatal(err)
	}
	// build <image> <dockerfile> ..., or the services' loop.
	built := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^build (\S+) (\S+)`).FindAllStringSubmatch(string(script), -1) {
		built[m[1]] = m[2]
	}
	if regexp.MustCompile(`build "usagebilling/\$s:dev" "deploy/docker/\$s.Dockerfile"`).Match(script) {
		for _, spec := range specs {
			built["usagebilling/"+spec.Name+":dev"] = "deploy/docker/" + spec.Name + ".Dockerfile"
		}
	}
	for name, s := range p.Services {
		if s.Build == nil {
			continue
		}
		if !strings.HasPrefix(s.Image, "usagebilling/") {
			t.Errorf("%s: built from %s but named %q: name it usagebilling/... so that the offline images are the ones it runs", name, s.Build.Dockerfile, s.Image)
		}
		if got, ok := built[s.Image]; !ok {
			t.Errorf("%s: offline/images.sh does not build %s", name, s.Image)
		} else if got != s.Build.Dockerfile {
			t.Errorf("%s: offline/images.sh builds %s from %s, compose from %s", name, s.Image, got, s.Build.Dockerfile)
		}
		if _, ok := s.Build.Args["BASE"]; !ok {
			t.Errorf("%s: no BASE build argument", name)
		}
		ins := readDockerfile(t, strings.TrimPrefix(s.Build.Dockerfile, "deploy/"))
		st := stages(ins)
		if from := strings.Fields(st[len(st)-1][0].args)[0]; from != "${BASE}" {
			t.Errorf("%s: the final stage of %s is FROM %s, want FROM ${BASE}", name, s.Build.Dockerfile, from)
		}
		for _, in := range ins {
			if in.cmd == "ARG" && strings.HasPrefix(in.args, "BUILD_FROM=") && in.args != "BUILD_FROM=source" {
				t.Errorf("%s: %s: ARG %s, want BUILD_FROM=source (registry users build as-is)", name, s.Build.Dockerfile, in.args)
			}
		}
	}
	// Services that run another's image (the topic job) use one that is built.
	for name, s := range p.Services {
		if s.Build == nil && strings.HasPrefix(s.Image, "usagebilling/") {
			if _, ok := built[s.Image]; !ok {
				t.Errorf("%s: runs %s, which nothing builds", name, s.Image)
			}
		}
	}
}

func TestKafkaImageVersions(t *testing.T) {
	pom, err := os.ReadFile("docker/kafka/pom.xml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(pom), "<artifactId>kafka_2.13</artifactId>\n      <version>"+kafkabroker.DefaultVersion+"</version>") {
		t.Errorf("docker/kafka/pom.xml does not fetch kafka_2.13 %s, the version of the offline jars (testkit/kafkabroker)", kafkabroker.DefaultVersion)
	}
	p := loadCompose(t)
	if img := composeService(t, p, kafkaService).Image; !strings.HasSuffix(img, ":"+kafkabroker.DefaultVersion) {
		t.Errorf("kafka image %s: want the tag %s", img, kafkabroker.DefaultVersion)
	}
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	sarama := regexp.MustCompile(`github.com/IBM/sarama (v\S+)`).FindSubmatch(mod)
	df, err := os.ReadFile("docker/kafka.Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if sarama == nil || !strings.Contains(string(df), "github.com/IBM/sarama@"+string(sarama[1])) {
		t.Errorf("docker/kafka.Dockerfile builds kafkatool with another sarama than deploy/go.mod's %s", sarama)
	}
}
