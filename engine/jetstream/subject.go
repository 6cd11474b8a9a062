package jetstream

import (
	"errors"
	"fmt"
	"strings"
)

// TopicVar is what a subject template replaces with an MQTT message's
// topic.
const TopicVar = "{topic}"

// Template maps MQTT topics into NATS subjects: the text before {topic},
// which ends the template, then the topic with each level a token of its
// own (ingest.mqtt.{topic} makes sensors/room 1/temp
// ingest.mqtt.sensors.room%201.temp). What a subject token cannot hold is
// escaped as %XX: white space and control characters, '.', '*', '>' and
// '%' itself; an empty level (a/b//c, /a) becomes %00, a byte no MQTT
// topic holds. The topic itself travels unchanged in the Mqtt-Topic
// header. A Template is a value, safe for concurrent use.
type Template struct {
	prefix string // the subject's tokens before the topic's, with their dot
}

// ParseTemplate reads a subject template: literal subject tokens, then
// {topic} as the last token. Errors say what is wrong in the template's
// own terms.
func ParseTemplate(s string) (Template, error) {
	prefix, ok := strings.CutSuffix(s, TopicVar)
	switch {
	case s == "":
		return Template{}, errors.New("empty")
	case !ok || strings.Contains(prefix, "{") || strings.Contains(prefix, "}"):
		return Template{}, fmt.Errorf("%q: must end with %s, once, as its last token (ingest.mqtt.%s)", s, TopicVar, TopicVar)
	case prefix != "" && !strings.HasSuffix(prefix, "."):
		return Template{}, fmt.Errorf("%q: %s must be a token of its own, after a dot", s, TopicVar)
	}
	if prefix != "" {
		if err := checkSubject(strings.TrimSuffix(prefix, "."), false); err != nil {
			return Template{}, fmt.Errorf("%q: %w", s, err)
		}
	}
	return Template{prefix: prefix}, nil
}

// String returns the template as ParseTemplate read it.
func (t Template) String() string { return t.prefix + TopicVar }

// Filter returns the subject filter every subject of t matches: the
// template's tokens, then >.
func (t Template) Filter() string { return t.prefix + ">" }

// Subject returns the subject of an MQTT message on topic.
func (t Template) Subject(topic []byte) string {
	b := make([]byte, 0, len(t.prefix)+len(topic)+8)
	b = append(b, t.prefix...)
	return string(appendTopic(b, topic))
}

// appendTopic appends topic as subject tokens, escaped.
func appendTopic(b, topic []byte) []byte {
	const hex = "0123456789ABCDEF"
	level := 0 // bytes of the current level so far
	for _, c := range topic {
		switch {
		case c == '/':
			if level == 0 {
				b = append(b, "%00"...)
			}
			b = append(b, '.')
			level = 0
			continue
		case c <= ' ' || c == 0x7f || c == '.' || c == '*' || c == '>' || c == '%':
			b = append(b, '%', hex[c>>4], hex[c&15])
		default:
			b = append(b, c)
		}
		level++
	}
	if level == 0 {
		b = append(b, "%00"...)
	}
	return b
}

// checkSubject says what makes s no valid subject, or with wild no valid
// subject filter.
func checkSubject(s string, wild bool) error {
	for i, tok := range strings.Split(s, ".") {
		switch {
		case tok == "":
			return fmt.Errorf("token %d is empty", i+1)
		case strings.ContainsAny(tok, " \t\r\n"):
			return fmt.Errorf("token %q holds white space", tok)
		case !wild && (strings.Contains(tok, "*") || strings.Contains(tok, ">")):
			return fmt.Errorf("token %q holds a wildcard", tok)
		}
	}
	return nil
}

// subjectCovers reports whether the subject filter f matches every
// subject the filter g does.
func subjectCovers(f, g string) bool {
	ft, gt := strings.Split(f, "."), strings.Split(g, ".")
	for i, t := range ft {
		switch {
		case t == ">":
			return i < len(gt)
		case i >= len(gt):
			return false
		case t == "*" && gt[i] != ">":
		case t != gt[i]:
			return false
		}
	}
	return len(ft) == len(gt)
}
