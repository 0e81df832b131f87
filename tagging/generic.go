package tagging

import "strings"

// generic says whether w is too general to tag anything: a common verb in
// any of its forms, a common adjective or adverb, or a unit of time.
// Words are stopwords already (words.Split drops them).
func generic(w string) bool {
	_, ok := genericWords[w]
	return ok || len(w) > 5 && strings.HasSuffix(w, "ly") && !strings.HasSuffix(w, "ply") // adverbs
}

// genericFunctionChars are Chinese characters of grammar, not topics: a
// pair of characters holding one is not a tag.
const genericFunctionChars = "的了是在和有也就都而及与或等之其为于把被让给从对向这那个们着过吗呢吧啊不没很太更最可以再又将已并"

var genericWords = func() map[string]struct{} {
	m := map[string]struct{}{}
	verbs := strings.Fields(`
		accept add allow appear apply ask become begin believe belong bring build buy call carry cause change check choose
		clean close come consider contain continue cover create cut decide describe develop die drop eat enable end enter
		expect explain fall feel fill find finish fit follow form give go grow happen hear help hold include increase
		involve join keep kill know lead learn leave lie lift like live look lose love make mean meet mind miss move
		need note offer open pass pay place plan play point prefer prepare present produce provide pull reach read
		react receive remain remember remove require rest return rise run save seem sell send serve set show sit
		spend stand start stay stop suggest supply support take talk tell tend think touch try turn understand visit
		wait walk want watch wear win wish work write care fix give`)
	for _, v := range verbs {
		for _, f := range inflections(v) {
			m[f] = struct{}{}
		}
	}
	for _, w := range strings.Fields(`
		able active alive bad best better big certain clear common different early easy enough entire full good great
		hard high important large last late little long low main major new next old open other possible quick real
		right several short simple small strong sure true usual whole wide young half part rich top
		day days week weeks month months year years hour hours minute minutes time times today
		thing things lot lots kind kinds sort way ways something anything everything nothing someone
		ran gave made went gone took taken came done saw seen told found kept left felt held brought bought built
		thought began begun chose chosen grew grown knew known led lost meant met paid read rose said sat sent set
		spent stood understood won wrote written`) {
		m[w] = struct{}{}
	}
	return m
}()

// inflections are a regular verb's forms: base, -s, -ed, -ing.
func inflections(v string) []string {
	forms := []string{v}
	switch {
	case strings.HasSuffix(v, "e"):
		forms = append(forms, v+"s", v+"d", v[:len(v)-1]+"ing")
	case strings.HasSuffix(v, "y") && len(v) > 2 && !strings.ContainsAny(v[len(v)-2:len(v)-1], "aeiou"):
		forms = append(forms, v[:len(v)-1]+"ies", v[:len(v)-1]+"ied", v+"ing")
	case strings.HasSuffix(v, "s") || strings.HasSuffix(v, "x") || strings.HasSuffix(v, "ch") || strings.HasSuffix(v, "sh"):
		forms = append(forms, v+"es", v+"ed", v+"ing")
	default:
		forms = append(forms, v+"s", v+"ed", v+"ing")
		// A short verb ending consonant-vowel-consonant doubles it: run, running.
		if n := len(v); n >= 3 && n <= 4 && !strings.ContainsAny(v[n-1:], "aeiouwxy") && strings.ContainsAny(v[n-2:n-1], "aeiou") && !strings.ContainsAny(v[n-3:n-2], "aeiou") {
			forms = append(forms, v+v[n-1:]+"ed", v+v[n-1:]+"ing")
		}
	}
	return forms
}
